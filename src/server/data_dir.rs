//! The data directory as a whole, at start-up: who owns it, its fingerprint, and the schema
//! its data was written with.
//!
//! * **One owner.** `tarn.lock` in the directory carries an exclusive `flock` for as long as
//!   the server runs, and the owner's pid as text. A second server on the same directory
//!   fails at once with "data_dir X is in use by pid N", before it reads or writes anything
//!   else there. The lock decides, not the file: a file left by a killed server holds no lock
//!   (the kernel drops it with the process) and does not block a start.
//! * **The fingerprint** is the directory's identity, random at creation; every WAL file and
//!   snapshot header carries it, so files of another directory are never mixed in.
//! * **The schema record**, `schema.bin` (`docs/format.md`): the spaces the data was written
//!   with. Spaces the config adds are accepted; a recorded space the config defines otherwise
//!   is recovered as recorded and then changed (`schema_change.rs`, which says what it refuses:
//!   a recorded space gone from the config, a new primary key). A lost `schema.bin` is rebuilt: the
//!   fingerprint from the headers of the data files, the spaces from the config (whether they
//!   match the data cannot be checked then, and a WARN says so).
//!
//! Start-up takes two steps, so that a start that fails changes nothing in the directory:
//! [`DataDir::open`], before any shard recovers, takes the lock and settles the fingerprint,
//! reading only; [`DataDir::record_schema`], once every shard has recovered, records the
//! config's schema. A start that ends before that puts the lock file back as it found it.
//!
//! Owns `tarn.lock`, `schema.bin` and the wording of their errors. Reads the WAL layer's file
//! names and headers for fingerprints only; knows nothing of recovery, executors or sockets.

use crate::config::Config;
use crate::server::schema::{self, RecordedSpaces};
use crate::server::schema_change::{self, SpaceChange};
use crate::server::ServerError;
use crate::wal::dir as wal_dir;
use crate::wal::format::{decode_file_header, DecodeError, FileKind, FILE_HEADER_SIZE_BYTES};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub const SCHEMA_FILE: &str = "schema.bin";
pub const LOCK_FILE: &str = "tarn.lock";
/// Opens of the lock file before giving up when it keeps being removed under us (only a
/// failed start of another server removes it, once).
const LOCK_ATTEMPTS: usize = 8;

/// Per space in the config: its id, name, and `_space` + `_index` rows.
type ConfigSpaces = Vec<(u32, String, Vec<u8>)>;

/// Where the fingerprint of this start came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaOrigin {
    /// `schema.bin`, checked against the config.
    Recorded,
    /// `schema.bin` was missing: the fingerprint is the data files', the spaces the config's.
    Rebuilt,
    /// A directory without data: a new fingerprint.
    New,
}

/// The data directory of a running (or starting) server. Holds the lock while it lives.
pub struct DataDir {
    path: PathBuf,
    lock: Lock,
    fingerprint: u64,
    origin: SchemaOrigin,
    /// See [`DataDir::schema_version`].
    schema_version: u64,
    spaces: ConfigSpaces,
    /// The spaces made or changed over CALL (`server::ddl`) that this start keeps: a space
    /// the config does not name, or a config space whose config entry has not changed since
    /// (a changed one is the config's again). See [`DataDir::made_spaces`].
    made: RecordedSpaces,
    /// The recorded spaces the config changes, each made once its shard has recovered.
    changes: Vec<SpaceChange>,
    /// The outcome of [`DataDir::record_schema`], once tried.
    recorded: OnceLock<Result<(), String>>,
}

impl DataDir {
    /// Takes the directory (creating it if missing) and settles its fingerprint: from
    /// `schema.bin`, checked against the config; else from the data files' headers; else a
    /// new one. Writes nothing but the lock file.
    pub fn open(config: &Config) -> Result<DataDir, ServerError> {
        let path = config.data_dir.clone();
        assert!(
            path.is_absolute(),
            "the config layer resolves data_dir to an absolute path: {}",
            path.display()
        );
        std::fs::create_dir_all(&path).map_err(|error| data_dir_error(&path, error))?;
        let lock = Lock::acquire(&path)?;
        let spaces = schema::user_space_rows(config);
        let files = FileFingerprints::scan(&path)?;
        let mut changes = Vec::new();
        let mut schema_version = 0;
        let mut made = Vec::new();
        let (fingerprint, origin) = match read_schema_file(&path)? {
            Some(SchemaFile {
                fingerprint,
                version,
                spaces: recorded,
                made: recorded_made,
            }) => {
                schema_version = version;
                let (recorded, kept) = with_made_spaces(&spaces, recorded, recorded_made);
                made = kept;
                changes = plan_changes(config, &spaces, &recorded, &path)?;
                files.check_all_carry(&path, fingerprint)?;
                (fingerprint, SchemaOrigin::Recorded)
            }
            None => match files.single(&path)? {
                Some(fingerprint) => {
                    tracing::warn!(
                        data_dir = %path.display(),
                        fingerprint = format_args!("{fingerprint:#018x}"),
                        data_files = files.readable_count(),
                        "{SCHEMA_FILE} is missing: rebuilding it from the headers of the data \
                         files (their fingerprint) and the spaces of the config; whether the \
                         config's spaces are those the data was written with could not be \
                         checked"
                    );
                    (fingerprint, SchemaOrigin::Rebuilt)
                }
                None => (new_fingerprint(), SchemaOrigin::New),
            },
        };
        tracing::info!(
            data_dir = %path.display(),
            pid = std::process::id(),
            schema = ?origin,
            fingerprint = format_args!("{fingerprint:#018x}"),
            "data directory locked ({LOCK_FILE})"
        );
        for change in &changes {
            tracing::info!(
                "schema change: {}; recovering the space as recorded, then rebuilding it \
                 under the config's definition",
                change.describe()
            );
        }
        Ok(DataDir {
            path,
            lock,
            fingerprint,
            origin,
            schema_version,
            spaces,
            made,
            changes,
            recorded: OnceLock::new(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The fingerprint every file written in this directory carries.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    pub fn origin(&self) -> SchemaOrigin {
        self.origin
    }

    /// The last schema version committed (0 until a schema change is made while serving).
    pub fn schema_version(&self) -> u64 {
        self.schema_version
    }

    /// The definitions of the spaces made or changed over CALL that this start keeps: each
    /// replaces the config's of its id, if any (the config's is the same as when it was
    /// made); recovery begins with them.
    pub fn made_spaces(&self) -> Result<Vec<crate::storage::SpaceDef>, ServerError> {
        self.made
            .iter()
            .map(|(id, rows)| {
                schema_change::decode_space_rows(rows).map_err(|reason| ServerError::DataDir {
                    path: self.path.join(SCHEMA_FILE),
                    reason: format!("the record of space {id} is damaged: {reason}"),
                })
            })
            .collect()
    }

    /// What a schema change while serving needs to record the schema it commits.
    pub fn schema_record(&self) -> SchemaRecord {
        SchemaRecord {
            dir: self.path.clone(),
            fingerprint: self.fingerprint,
            version: self.schema_version,
            config_spaces: self.spaces.clone(),
            made: self.made.clone(),
        }
    }

    /// The recorded spaces the config changes (none for a new or rebuilt record).
    pub fn schema_changes(&self) -> &[SpaceChange] {
        &self.changes
    }

    /// Records the config's schema in `schema.bin`; call it once every shard has recovered.
    /// Safe from several threads: the first call writes, the others wait for it and get its
    /// outcome. An unchanged record is not rewritten.
    pub fn record_schema(&self) -> Result<(), ServerError> {
        self.record_schema_after(|| Ok(()))
    }

    /// [`DataDir::record_schema`], after `record_others` (the other records that wait for
    /// recovery, the layout's): the first call runs both, the others get their outcome.
    pub fn record_schema_after(
        &self,
        record_others: impl FnOnce() -> Result<(), String>,
    ) -> Result<(), ServerError> {
        let outcome = self.recorded.get_or_init(|| {
            record_others()?;
            let bytes = encode_schema_file(
                self.fingerprint,
                self.schema_version,
                &self.spaces,
                &self.made,
            );
            let path = self.path.join(SCHEMA_FILE);
            if std::fs::read(&path).is_ok_and(|on_disk| on_disk == bytes) {
                return Ok(());
            }
            write_atomically(&self.path, SCHEMA_FILE, &bytes)
                .map_err(|error| format!("recording {SCHEMA_FILE}: {error}"))?;
            tracing::info!(
                path = %path.display(),
                spaces = self.spaces.len(),
                "schema recorded"
            );
            Ok(())
        });
        outcome.clone().map_err(|reason| ServerError::DataDir {
            path: self.path.clone(),
            reason,
        })
    }
}

impl Drop for DataDir {
    /// A start that got as far as recording the schema leaves its pid in the lock file; one
    /// that did not leaves the lock file as it found it (see [`Lock`]'s drop).
    fn drop(&mut self) {
        if matches!(self.recorded.get(), Some(Ok(()))) {
            self.lock.keep = true;
        }
    }
}

/// The spaces recorded as the config had them and those made over CALL (`made`), as the
/// plan of the config's changes must see them, and the made ones this start keeps. A made
/// definition replaces the config's record of its id while the config's entry is as it was
/// recorded; once the config changes that entry (or names a made space's id for the first
/// time), the made definition is what the data was written under, and the config's is
/// planned as a change from it.
fn with_made_spaces(
    config: &ConfigSpaces,
    mut recorded: RecordedSpaces,
    made: RecordedSpaces,
) -> (RecordedSpaces, RecordedSpaces) {
    let config_rows = |id: u32| config.iter().find(|(config_id, ..)| *config_id == id);
    let mut kept = Vec::new();
    for (id, rows) in made {
        let applied = recorded
            .iter_mut()
            .find(|(recorded_id, _)| *recorded_id == id);
        match (config_rows(id), applied) {
            (Some((_, _, wanted)), Some((_, applied))) if *wanted == *applied => {
                kept.push((id, rows))
            }
            (Some(_), Some((_, applied))) => *applied = rows,
            (Some(_), None) => recorded.push((id, rows)),
            (None, _) => kept.push((id, rows)),
        }
    }
    (recorded, kept)
}

/// What `schema.bin` holds while the server runs, for a schema change to record its new
/// version and definitions (see [`SchemaRecord::write`]).
#[derive(Debug, Clone)]
pub struct SchemaRecord {
    pub dir: PathBuf,
    pub fingerprint: u64,
    /// The last version committed.
    pub version: u64,
    config_spaces: ConfigSpaces,
    /// Every space made or changed over CALL, as the last committed version left it.
    pub made: RecordedSpaces,
}

impl SchemaRecord {
    /// Records `version`, with `space_id` defined by `rows` (a space's `_space` and `_index`
    /// rows) or dropped (`None`): the commit point of a schema change. Written aside,
    /// fsynced and renamed, so a crash leaves the old record or the new.
    pub fn write(
        &mut self,
        version: u64,
        space_id: u32,
        rows: Option<&[u8]>,
    ) -> Result<(), String> {
        let mut made = self.made.clone();
        made.retain(|(id, _)| *id != space_id);
        if let Some(rows) = rows {
            made.push((space_id, rows.to_vec()));
            made.sort_by_key(|(id, _)| *id);
        }
        let bytes = encode_schema_file(self.fingerprint, version, &self.config_spaces, &made);
        write_atomically(&self.dir, SCHEMA_FILE, &bytes)
            .map_err(|error| format!("recording {SCHEMA_FILE}: {error}"))?;
        self.version = version;
        self.made = made;
        Ok(())
    }
}

/// The changes `config` makes to the recorded spaces, or why they are refused.
fn plan_changes(
    config: &Config,
    spaces: &ConfigSpaces,
    recorded: &RecordedSpaces,
    path: &Path,
) -> Result<Vec<SpaceChange>, ServerError> {
    let wanted: Vec<_> = spaces
        .iter()
        .zip(&config.spaces)
        .map(|((id, name, rows), space)| {
            (*id, name.clone(), rows.clone(), schema::space_def(space))
        })
        .collect();
    schema_change::plan(recorded, &wanted, config.drop_missing_spaces).map_err(|reason| {
        ServerError::DataDir {
            path: path.join(SCHEMA_FILE),
            reason,
        }
    })
}

fn new_fingerprint() -> u64 {
    // Never 0: 0 stands for "no data directory" in tests and tools.
    rand::random::<u64>() | 1
}

fn data_dir_error(path: &Path, error: std::io::Error) -> ServerError {
    ServerError::DataDir {
        path: path.to_owned(),
        reason: error.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// The lock

/// `tarn.lock`, open and `flock`ed; what it held before this process wrote its pid.
/// Dropped without `keep` (a start that failed), it puts the file back as it was.
struct Lock {
    path: PathBuf,
    file: File,
    /// `None` when this process created the file.
    previous_bytes: Option<Vec<u8>>,
    keep: bool,
}

impl Lock {
    fn acquire(data_dir: &Path) -> Result<Lock, ServerError> {
        let path = data_dir.join(LOCK_FILE);
        let io_error = |error: std::io::Error| data_dir_error(&path, error);
        for _ in 0..LOCK_ATTEMPTS {
            let (mut file, created) = match open_lock_file(&path) {
                Ok(Some(opened)) => opened,
                // Removed between our two opens: look again.
                Ok(None) => continue,
                Err(error) => return Err(io_error(error)),
            };
            if !try_lock_exclusive(&file).map_err(io_error)? {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(ServerError::DataDirInUse {
                    path: data_dir.to_owned(),
                    owner: describe_owner(&text),
                });
            }
            // A failed start of another server removes the file it created while it holds
            // the lock; a lock taken on a file that is no longer at `path` guards nothing.
            if !is_at_path(&file, &path).map_err(io_error)? {
                continue;
            }
            let previous_bytes = if created {
                None
            } else {
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes).map_err(io_error)?;
                Some(bytes)
            };
            let lock = Lock {
                path: path.clone(),
                file,
                previous_bytes,
                keep: false,
            };
            // Dropped on failure, the lock puts back what a partial write changed.
            let pid = format!("{}\n", std::process::id());
            replace_contents(&lock.file, pid.as_bytes()).map_err(io_error)?;
            return Ok(lock);
        }
        Err(ServerError::DataDir {
            path,
            reason: "the lock file kept disappearing while being locked; is another tarn \
                     starting on this data_dir again and again?"
                .into(),
        })
    }
}

impl Drop for Lock {
    /// Restores what the file held before (or removes it, if this process created it),
    /// while the lock is still held; closing the file then releases it.
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        let result = match &self.previous_bytes {
            None => std::fs::remove_file(&self.path),
            Some(bytes) => replace_contents(&self.file, bytes),
        };
        if let Err(error) = result {
            tracing::warn!(path = %self.path.display(), %error, "could not put the lock file back");
        }
    }
}

/// Opens (or creates) the lock file for reading and writing; `true` if this call created it.
/// `None` if it was removed between the attempt to create it and the open.
fn open_lock_file(path: &Path) -> std::io::Result<Option<(File, bool)>> {
    let mut options = OpenOptions::new();
    options.read(true).write(true);
    match options.clone().create_new(true).open(path) {
        Ok(file) => return Ok(Some((file, true))),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(error),
    }
    match options.open(path) {
        Ok(file) => Ok(Some((file, false))),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// `flock(LOCK_EX | LOCK_NB)` (what `File::try_lock` calls on Linux): `false` if another
/// open file holds it. The lock belongs to this open file and goes when it is closed (or
/// the process dies).
fn try_lock_exclusive(file: &File) -> std::io::Result<bool> {
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(error)) => Err(error),
    }
}

/// Whether `path` still names the file `file` has open.
fn is_at_path(file: &File, path: &Path) -> std::io::Result<bool> {
    let open = file.metadata()?;
    match std::fs::metadata(path) {
        Ok(named) => Ok(named.dev() == open.dev() && named.ino() == open.ino()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
    }
}

fn replace_contents(file: &File, bytes: &[u8]) -> std::io::Result<()> {
    file.set_len(0)?;
    file.write_all_at(bytes, 0)
}

/// "pid N" from the lock file's text, or why there is no pid to name.
fn describe_owner(text: &str) -> String {
    match text.trim().parse::<u32>() {
        Ok(pid) => format!("pid {pid}"),
        Err(_) => "another process (its pid is not written yet)".into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Fingerprints in the data files

/// The fingerprints in the headers of every snapshot and WAL file of every shard directory.
#[derive(Debug, Default)]
struct FileFingerprints {
    /// Fingerprint → how many files carry it, and one of them.
    readable: BTreeMap<u64, (usize, PathBuf)>,
    /// Files whose header is whole but does not decode, and why.
    damaged: Vec<(PathBuf, String)>,
}

impl FileFingerprints {
    /// Reads the first bytes of each data file. Files shorter than a header hold no rows (a
    /// WAL file torn while it was started) and count for nothing.
    fn scan(data_dir: &Path) -> Result<FileFingerprints, ServerError> {
        let mut found = FileFingerprints::default();
        for shard_dir in shard_dirs(data_dir)? {
            let listing = wal_dir::list(&shard_dir).map_err(|error| ServerError::DataDir {
                path: shard_dir.clone(),
                reason: error.to_string(),
            })?;
            let snapshots = listing
                .snapshots
                .iter()
                .map(|(_, path)| (path, FileKind::Snapshot));
            let wal_files = listing
                .wal_files
                .iter()
                .map(|(_, path)| (path, FileKind::Wal));
            for (path, kind) in snapshots.chain(wal_files) {
                match read_header_fingerprint(path, kind)
                    .map_err(|error| data_dir_error(path, error))?
                {
                    HeaderRead::Fingerprint(fingerprint) => {
                        let entry = found
                            .readable
                            .entry(fingerprint)
                            .or_insert_with(|| (0, path.clone()));
                        entry.0 += 1;
                    }
                    HeaderRead::Short => {}
                    HeaderRead::Damaged(reason) => found.damaged.push((path.clone(), reason)),
                }
            }
        }
        Ok(found)
    }

    fn readable_count(&self) -> usize {
        self.readable.values().map(|(count, _)| count).sum()
    }

    /// With `schema.bin` present: every data file must carry its fingerprint. Recovery would
    /// refuse a file that does not too, but here the reason can be named: the fingerprint is
    /// the directory's identity, not a digest of the spaces.
    fn check_all_carry(&self, data_dir: &Path, fingerprint: u64) -> Result<(), ServerError> {
        let foreign: Vec<String> = self
            .readable
            .iter()
            .filter(|(found, _)| **found != fingerprint)
            .map(|(found, (count, example))| describe_group(*found, *count, example))
            .collect();
        if foreign.is_empty() {
            return Ok(());
        }
        Err(ServerError::DataDir {
            path: data_dir.join(SCHEMA_FILE),
            reason: format!(
                "it records fingerprint {fingerprint:#018x}, but data files carry another: {}. \
                 Either {SCHEMA_FILE} belongs to another data directory (remove it, and tarn \
                 rebuilds it from the data files at the next start) or those files do (move \
                 them away)",
                foreign.join("; ")
            ),
        })
    }

    /// With `schema.bin` missing: the one fingerprint the data files carry, or `None` when
    /// there are no data files. Files that disagree, or data files none of which can be read,
    /// refuse the start: inventing a fingerprint there would disown the data.
    fn single(&self, data_dir: &Path) -> Result<Option<u64>, ServerError> {
        let missing = data_dir.join(SCHEMA_FILE);
        match self.readable.len() {
            1 => Ok(self.readable.keys().next().copied()),
            0 if self.damaged.is_empty() => Ok(None),
            0 => Err(ServerError::DataDir {
                path: missing,
                reason: format!(
                    "it is missing, and no data file has a readable header to rebuild it \
                     from ({}); restore {SCHEMA_FILE} from a backup",
                    describe_damaged(&self.damaged)
                ),
            }),
            _ => Err(ServerError::DataDir {
                path: missing,
                reason: format!(
                    "it is missing, and the data files carry different fingerprints, so files \
                     of different data directories are mixed here: {}. Move the foreign ones \
                     away (or restore {SCHEMA_FILE} from a backup)",
                    self.readable
                        .iter()
                        .map(|(found, (count, example))| describe_group(*found, *count, example))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            }),
        }
    }
}

fn describe_group(fingerprint: u64, count: usize, example: &Path) -> String {
    format!(
        "{fingerprint:#018x} in {count} file(s), such as {}",
        example.display()
    )
}

fn describe_damaged(damaged: &[(PathBuf, String)]) -> String {
    damaged
        .iter()
        .map(|(path, reason)| format!("{}: {reason}", path.display()))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `<data_dir>/shard-<k>` for every `k` present, whatever the configured shard count.
fn shard_dirs(data_dir: &Path) -> Result<Vec<PathBuf>, ServerError> {
    let mut dirs = Vec::new();
    let entries = std::fs::read_dir(data_dir).map_err(|error| data_dir_error(data_dir, error))?;
    for entry in entries {
        let entry = entry.map_err(|error| data_dir_error(data_dir, error))?;
        let name = entry.file_name();
        let is_shard = name
            .to_str()
            .and_then(|name| name.strip_prefix("shard-"))
            .is_some_and(|id| id.parse::<u32>().is_ok());
        if is_shard && entry.path().is_dir() {
            dirs.push(entry.path());
        }
    }
    dirs.sort();
    Ok(dirs)
}

enum HeaderRead {
    Fingerprint(u64),
    /// Fewer bytes than a header.
    Short,
    Damaged(String),
}

fn read_header_fingerprint(path: &Path, kind: FileKind) -> std::io::Result<HeaderRead> {
    let mut bytes = Vec::with_capacity(FILE_HEADER_SIZE_BYTES);
    File::open(path)?
        .take(FILE_HEADER_SIZE_BYTES as u64)
        .read_to_end(&mut bytes)?;
    Ok(match decode_file_header(&bytes, kind) {
        Ok(header) => HeaderRead::Fingerprint(header.schema_fingerprint),
        Err(DecodeError::Incomplete { .. }) => HeaderRead::Short,
        Err(DecodeError::Invalid { reason }) => HeaderRead::Damaged(reason),
    })
}

// ---------------------------------------------------------------------------------------------
// schema.bin

/// What `schema.bin` records.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SchemaFile {
    fingerprint: u64,
    /// The last schema version committed; 0 when the record has none.
    version: u64,
    spaces: RecordedSpaces,
    /// The spaces made or changed over CALL.
    made: RecordedSpaces,
}

/// The pseudo space id of the entry that holds the spaces made over CALL, themselves as
/// `schema::write_entries` writes them.
const MADE_ENTRY_ID: u32 = u32::MAX - 1;

/// The recorded fingerprint and spaces, or `None` if there is no `schema.bin`.
fn read_schema_file(data_dir: &Path) -> Result<Option<SchemaFile>, ServerError> {
    let path = data_dir.join(SCHEMA_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(data_dir_error(&path, error)),
    };
    match decode_schema_file(&bytes) {
        Some(decoded) => Ok(Some(decoded)),
        None => Err(ServerError::DataDir {
            path,
            reason: "the schema record is damaged; remove it, and tarn rebuilds it from the \
                     data files' headers and the config at the next start (without checking \
                     that the config's spaces are those the data was written with)"
                .into(),
        }),
    }
}

/// `[fingerprint u64 LE]`, then the version and the spaces as `schema::write_entries`
/// writes them: the config's, and (when there are any) the made ones in one entry of id
/// [`MADE_ENTRY_ID`] (a record without made spaces reads as before they existed).
fn encode_schema_file(
    fingerprint: u64,
    version: u64,
    spaces: &[(u32, String, Vec<u8>)],
    made: &[(u32, Vec<u8>)],
) -> Vec<u8> {
    let mut bytes = fingerprint.to_le_bytes().to_vec();
    let mut made_entry = Vec::new();
    schema::write_entries(
        &mut made_entry,
        0,
        made.iter().map(|(id, rows)| (*id, &rows[..])),
    );
    let made_entry = (!made.is_empty()).then_some((MADE_ENTRY_ID, &made_entry[..]));
    let entries = spaces.iter().map(|(id, _, rows)| (*id, &rows[..]));
    schema::write_entries(&mut bytes, version, made_entry.into_iter().chain(entries));
    bytes
}

fn decode_schema_file(bytes: &[u8]) -> Option<SchemaFile> {
    let fingerprint = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let (version, mut spaces) = schema::read_entries(&bytes[8..])?;
    let mut made = Vec::new();
    if let Some(at) = spaces.iter().position(|(id, _)| *id == MADE_ENTRY_ID) {
        let (_, entry) = spaces.remove(at);
        made = schema::read_entries(&entry)?.1;
    }
    Some(SchemaFile {
        fingerprint,
        version,
        spaces,
        made,
    })
}

/// Writes `name` in `dir` through a temporary name, fsynced, renamed, and the directory
/// fsynced, so a crash leaves the old contents or the new.
fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let path = dir.join(name);
    let temporary = dir.join(format!("{name}.inprogress"));
    let mut file = File::create(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, &path)?;
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests;
