//! The config's spaces reloaded on SIGHUP (`docs/ddl.md`, step 5): the config read again as
//! at start-up (file, then the command line's flags), each of its space entries that
//! changed since it was last applied compared with what the shards serve, and the changes
//! the start-up would make (a space created, an index or a field added, a type widened, a
//! rename) made one at a time through the DDL coordinator while serving, as a migration's
//! calls would be. The data decides as it does for a call: a change it does not allow (a
//! duplicate in a new unique index, a narrower type a tuple violates) is refused and
//! changes nothing. What SIGHUP does not do is logged and left: a new primary key (refused
//! at start-up too), a space gone from the config (kept; a start with
//! `--drop-missing-spaces` drops it), and every setting outside `[[space]]`, which takes
//! effect at the next start.
//!
//! An entry the config did not change leaves its space as it is served, so a `create_index`
//! made over CALL on a config space stands across reloads, as it does across restarts.
//!
//! Owns the signal and which entries changed; the plan is `schema_change`'s, the change
//! `ddl`'s.

use crate::config::Config;
use crate::server::mesh::core::Core;
use crate::server::{ddl, schema, schema_change, ServerError};
use crate::shard::DefinitionChange;
use crate::storage::{Engine, SpaceDef};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often core 0 looks for a SIGHUP.
const HANGUP_POLL: Duration = Duration::from_millis(100);

/// Reads the config as the server was started with it.
pub type ConfigReader = Box<dyn Fn() -> Result<Config, String> + Send + Sync>;

/// What a SIGHUP reloads, and the config's space entries as last applied.
pub struct Reloader {
    hangup: Arc<AtomicBool>,
    read: ConfigReader,
    /// `(id, name, _space and _index rows)` of each config space, as last applied.
    applied: Mutex<Vec<(u32, String, Vec<u8>)>>,
}

impl Reloader {
    /// Listens for SIGHUP; `started` is the config the server started with.
    pub fn new(read: ConfigReader, started: &Config) -> Result<Reloader, ServerError> {
        let hangup = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGHUP, hangup.clone())
            .map_err(ServerError::Signal)?;
        Ok(Reloader {
            hangup,
            read,
            applied: Mutex::new(schema::user_space_rows(started)),
        })
    }
}

/// Core 0's watch: reloads the config's spaces after each SIGHUP.
pub async fn watch(core: Rc<Core>, reloader: Arc<Reloader>) {
    loop {
        glommio::timer::sleep(HANGUP_POLL).await;
        if reloader.hangup.swap(false, Ordering::AcqRel) {
            reload(&core, &reloader).await;
        }
    }
}

async fn reload(core: &Rc<Core>, reloader: &Reloader) {
    let config = match (reloader.read)() {
        Ok(config) => config,
        Err(error) => {
            tracing::error!(%error, "SIGHUP: the config was not reloaded; nothing changed");
            return;
        }
    };
    let entries = schema::user_space_rows(&config);
    let changed: Vec<SpaceDef> = {
        let applied = reloader
            .applied
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        config
            .spaces
            .iter()
            .zip(&entries)
            .filter(|(_, entry)| !applied.contains(entry))
            .map(|(space, _)| schema::space_def(space))
            .collect()
    };
    let planned = planned_changes(&core.shard.borrow().engine, &changed);
    let changes = match planned {
        Ok(changes) => changes,
        Err(reason) => {
            tracing::error!(%reason, "SIGHUP: the config's spaces were not changed");
            return;
        }
    };
    tracing::info!(
        changes = changes.len(),
        "SIGHUP: the config's spaces reloaded"
    );
    for (what, change) in changes {
        let turn = core.shared.ddl.take_turn().await;
        match ddl::change(core, &turn, change).await {
            Ok(()) => tracing::info!("SIGHUP: schema change made: {what}"),
            Err(error) => {
                tracing::error!(%error, "SIGHUP: schema change refused: {what}; the ones after it were not tried");
                return;
            }
        }
    }
    *reloader
        .applied
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = entries;
}

/// The changes that put the spaces `wanted` (config entries that changed) as the config
/// defines them, each with what it does, or why they are refused (nothing is made then).
fn planned_changes(
    engine: &Engine,
    wanted: &[SpaceDef],
) -> Result<Vec<(String, DefinitionChange)>, String> {
    let served: Vec<(u32, Vec<u8>)> = wanted
        .iter()
        .filter_map(|def| engine.space_def(def.id))
        .map(|def| (def.id, schema::space_rows(&def)))
        .collect();
    let config: Vec<_> = wanted
        .iter()
        .map(|def| {
            let rows = schema::space_rows(def);
            (def.id, def.name.to_string(), rows, def.clone())
        })
        .collect();
    let mut changes: Vec<(String, DefinitionChange)> =
        schema_change::plan(&served, &config, false)?
            .into_iter()
            .filter_map(|change| {
                let what = change.describe();
                change
                    .wanted
                    .map(|def| (what, DefinitionChange::Redefine(def)))
            })
            .collect();
    for def in wanted {
        if engine.space_def(def.id).is_none() {
            let what = format!("space {} '{}' created", def.id, def.name);
            changes.push((what, DefinitionChange::Create(def.clone())));
        }
    }
    Ok(changes)
}
