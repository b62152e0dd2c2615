//! Starts the real `tarn` binary on an ephemeral loopback port for integration tests.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tarn::msgpack::{write_array_len, write_str, write_uint};
use tarn::protocol::client::split_server_frame;

/// The shipped example spaces plus the `bench` user the Python tests authenticate as.
pub const TEST_CONFIG_EXTRA: &str = r#"
[[user]]
name = "bench"
password = "secret"
grants = ["read", "write", "execute"]
"#;

pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// Everything tarn logged so far, and the thread that reads it (done at tarn's exit).
    log: std::sync::Arc<std::sync::Mutex<String>>,
    log_reader: Option<std::thread::JoinHandle<()>>,
    _dir: Option<tempfile::TempDir>,
}

impl Server {
    /// Starts tarn with the shipped config (plus `extra` TOML) and `shards` shards.
    pub fn start(shards: u32, extra: &str) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut server = Server::start_in(dir.path(), shards, extra, &[]);
        server._dir = Some(dir);
        server
    }

    /// Starts tarn with its config and data under `dir`, which outlives the server, so a
    /// restart in the same `dir` recovers what the previous one wrote.
    pub fn start_in(dir: &std::path::Path, shards: u32, extra: &str, args: &[&str]) -> Server {
        let shipped = include_str!("../../conf/tarn.toml");
        match Server::try_start_with(dir, &format!("{shipped}\n{extra}"), shards, args) {
            Ok(server) => server,
            Err(log) => panic!("tarn did not start:\n{log}"),
        }
    }

    /// Starts tarn on the config text `config_toml` (written to `dir/tarn.toml`) with data in
    /// `dir/data`; if it exits before listening, returns everything it logged.
    pub fn try_start_with(
        dir: &std::path::Path,
        config_toml: &str,
        shards: u32,
        args: &[&str],
    ) -> Result<Server, String> {
        Server::try_start_with_env(dir, config_toml, shards, args, &[])
    }

    /// [`Server::try_start_with`] with `env` set for tarn only (not for the test process,
    /// whose other tests start servers too).
    pub fn try_start_with_env(
        dir: &std::path::Path,
        config_toml: &str,
        shards: u32,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Server, String> {
        let config_path = dir.join("tarn.toml");
        std::fs::write(&config_path, config_toml).expect("write config");
        let mut command = Command::new(env!("CARGO_BIN_EXE_tarn"));
        command
            .arg("--config")
            .arg(&config_path)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--shards")
            .arg(shards.to_string())
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(args)
            .envs(env.iter().copied())
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info");
        Server::spawn(command)
    }

    /// Runs `command` (a `tarn` command line, its working directory and environment set by
    /// the caller) with its log read as [`Server::try_start_with`] does: the server once it
    /// listens, or everything it logged if it exits first.
    pub fn spawn(mut command: Command) -> Result<Server, String> {
        let mut child = command
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start tarn");
        let stderr = child.stderr.take().expect("stderr");
        let (sender, receiver) = std::sync::mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let log_writer = log.clone();
        let log_reader = std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[tarn] {line}");
                let mut log = log_writer.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
                if !sent {
                    if let Some(at) = line.find("listening on ") {
                        let addr: String = line[at + 13..]
                            .chars()
                            .take_while(|c| !c.is_whitespace())
                            .collect();
                        let _ = sender.send(Ok(addr));
                        sent = true;
                    }
                }
            }
            if !sent {
                let _ = sender.send(Err(log_writer.lock().unwrap().clone()));
            }
        });
        match receiver.recv_timeout(Duration::from_secs(30)) {
            Ok(Ok(addr)) => Ok(Server {
                child,
                addr: addr.parse().expect("address"),
                log,
                log_reader: Some(log_reader),
                _dir: None,
            }),
            Ok(Err(log)) => {
                let _ = child.wait();
                Err(log)
            }
            Err(_) => {
                let _ = child.kill();
                Err("tarn neither listened nor exited in 30 s".into())
            }
        }
    }

    /// Waits up to `timeout` for a log line containing `needle`; whether one came.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.log.lock().unwrap().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Kills the server with SIGKILL, as a crash would, and waits for it to be gone.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything tarn logged so far.
    pub fn log_so_far(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// [`Server::stop`], and everything tarn logged.
    pub fn stop_with_log(self) -> (Option<i32>, String) {
        self.stop_with_log_within(Duration::from_secs(10))
    }

    /// [`Server::stop_with_log`], waiting up to `timeout` for the exit.
    pub fn stop_with_log_within(mut self, timeout: Duration) -> (Option<i32>, String) {
        let (log, reader) = (self.log.clone(), self.log_reader.take());
        let status = self.stop_within(timeout);
        // Once tarn has exited its stderr ends, and so does the thread reading it.
        if let (Some(_), Some(reader)) = (status, reader) {
            let _ = reader.join();
        }
        let text = log.lock().unwrap().clone();
        (status, text)
    }

    /// Sends SIGTERM and waits for a clean exit; returns the exit status code.
    pub fn stop(self) -> Option<i32> {
        self.stop_within(Duration::from_secs(10))
    }

    /// [`Server::stop`], waiting up to `timeout` for the exit.
    pub fn stop_within(mut self, timeout: Duration) -> Option<i32> {
        unsafe_kill(self.child.id(), "TERM");
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

fn unsafe_kill(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status();
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Python with the `tarantool` connector: `$TARN_PYTHON`, else the repo's `.venv`.
pub fn python() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("TARN_PYTHON") {
        return Some(PathBuf::from(path));
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    venv.exists().then_some(venv)
}

/// A master (2 shards) and its read-only replica (1 shard) following it as `bench`, for the
/// pool tests in `tests/python`: runs pytest on `file` with `TARN_ADDR` the master's address
/// and `replica_env` the replica's, and asserts it passed. Skipped (said so) without Python,
/// except on CI.
pub fn run_pool_test(file: &str, replica_env: &str) {
    let Some(python) = python() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must provide the Python connector"
        );
        eprintln!("skipping: no Python with the tarantool connector (run .ci/run once)");
        return;
    };
    let master = Server::start(2, TEST_CONFIG_EXTRA);
    let replica_dir = tempfile::tempdir().expect("temp dir");
    let upstream = format!("bench:secret@{}", master.addr);
    let replica = Server::start_in(
        replica_dir.path(),
        1,
        TEST_CONFIG_EXTRA,
        &["--replication", &upstream, "--read-only"],
    );
    let status = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/python")
                .join(file),
        )
        .env("TARN_ADDR", master.addr.to_string())
        .env(replica_env, replica.addr.to_string())
        .status()
        .expect("run pytest");
    assert!(
        status.success(),
        "{}\n{}",
        master.log_so_far(),
        replica.log_so_far()
    );
}

/// A raw IPROTO client over a blocking socket.
pub struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(server: &Server) -> Client {
        Client::connect_to(server.addr)
    }

    pub fn connect_to(addr: SocketAddr) -> Client {
        Client::connect_with_salt(addr).0
    }

    /// Connects and authenticates as `user` (chap-sha1, as connectors do); panics unless
    /// the server accepts.
    pub fn connect_as(server: &Server, user: &str, password: &str) -> Client {
        let (mut client, salt) = Client::connect_with_salt(server.addr);
        let mut auth = Vec::new();
        tarn::protocol::client::encode_auth(&mut auth, 0, user, &salt, password.as_bytes());
        client.send(&auth);
        let packet = client.read_packet().expect("an auth reply");
        let reply = tarn::protocol::client::decode_reply(&packet).expect("decodes");
        assert!(
            !reply.is_error(),
            "auth as {user}: {:?}",
            reply.error_message()
        );
        client
    }

    /// A connection and the salt its greeting carried.
    fn connect_with_salt(addr: SocketAddr) -> (Client, Vec<u8>) {
        use base64::Engine as _;
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut greeting = [0u8; 128];
        stream.read_exact(&mut greeting).expect("greeting");
        assert!(greeting.starts_with(b"Tarantool 2.11.1 (Binary) "));
        let salt_line = String::from_utf8_lossy(&greeting[64..]).trim().to_string();
        let salt = base64::engine::general_purpose::STANDARD
            .decode(salt_line.as_bytes())
            .expect("a base64 salt");
        let client = Client {
            stream,
            buf: Vec::new(),
        };
        (client, salt)
    }

    /// The socket, e.g. to clone it for a sending thread.
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// `send` for a server that may be gone (a crash test kills it mid-stream).
    pub fn try_send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Reads one reply packet (status, sync, raw packet bytes); `None` on close.
    pub fn read_packet(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Ok(Some((packet, used))) = split_server_frame(&self.buf) {
                let packet = packet.to_vec();
                self.buf.drain(..used);
                return Some(packet);
            }
            let mut chunk = [0u8; 65536];
            let read = self.stream.read(&mut chunk).ok()?;
            if read == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..read]);
        }
    }
}

/// The `kv` space of the shipped config.
pub const KV: u32 = 512;

/// A one-part key `[id]`.
pub fn kv_key(id: u64) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 1);
    write_uint(&mut out, id);
    out
}

/// Appends a framed SELECT on `kv`'s primary index by `[id]`.
pub fn encode_kv_select(out: &mut Vec<u8>, sync: u64, iterator: u32, id: u64, limit: u32) {
    let key = kv_key(id);
    tarn::protocol::client::encode_select(
        out,
        sync,
        &tarn::protocol::request::Select {
            space_id: KV,
            index_id: 0,
            limit,
            offset: 0,
            iterator,
            key: &key,
            fetch_position: false,
            after_position: None,
            after_tuple: None,
        },
    );
}

/// A tuple of the shipped `kv` space: `[id, id % 3000, value]`.
pub fn kv_tuple(id: u64, value: &str) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 3);
    write_uint(&mut out, id);
    write_uint(&mut out, id % 3000);
    write_str(&mut out, value.as_bytes());
    out
}

/// Every tuple of `kv` (SELECT ALL on the primary index), in key order, with its id.
/// Starts tarn again in `dir` (config and data of a [`Server::start_in`] there), listening
/// on `addr`, with `args` added.
pub fn restart_on(dir: &std::path::Path, shards: u32, addr: SocketAddr, args: &[&str]) -> Server {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tarn"));
    command
        .arg("--config")
        .arg(dir.join("tarn.toml"))
        .args([
            "--listen",
            &addr.to_string(),
            "--shards",
            &shards.to_string(),
        ])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(args)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info");
    Server::spawn(command).unwrap_or_else(|log| panic!("tarn did not restart:\n{log}"))
}

/// Replaces `ids` in kv, pipelined; the error code of each reply (0: written).
pub fn kv_replace_codes(addr: SocketAddr, ids: impl Iterator<Item = u64>, value: &str) -> Vec<u32> {
    let mut client = Client::connect_to(addr);
    let mut requests = Vec::new();
    let mut sent = 0;
    for id in ids {
        tarn::protocol::client::encode_replace(&mut requests, id, KV, &kv_tuple(id, value));
        sent += 1;
    }
    client.send(&requests);
    (0..sent)
        .map(|_| {
            let packet = client.read_packet().expect("a reply");
            let reply = tarn::protocol::client::decode_reply(&packet).expect("decodes");
            reply.error_code().map_or(0, |code| code.0)
        })
        .collect()
}

/// The shipped config with `replication_synchro_quorum = 2`, `kv` made `is_sync`, and
/// `replication_synchro_timeout` set to `timeout_seconds`.
pub fn sync_kv_config(timeout_seconds: &str) -> String {
    let shipped = include_str!("../../conf/tarn.toml");
    let config = shipped
        .replace(
            "replication_synchro_quorum = 1",
            "replication_synchro_quorum = 2",
        )
        .replace(
            "replication_synchro_timeout = 5",
            &format!("replication_synchro_timeout = {timeout_seconds}"),
        )
        .replacen("name = \"kv\"\n", "name = \"kv\"\nis_sync = true\n", 1);
    assert!(config.contains("is_sync = true") && config.contains("quorum = 2"));
    config
}

pub fn kv_rows(addr: SocketAddr) -> Vec<(u64, Vec<u8>)> {
    select_rows(addr, KV, 0, 2, &[0x90])
}

/// The tuples a SELECT on `space_id`'s index `index_id` by `key` (a msgpack array) with
/// `iterator` and no limit answers, in reply order, each with its first field, an unsigned id.
pub fn select_rows(
    addr: SocketAddr,
    space_id: u32,
    index_id: u32,
    iterator: u32,
    key: &[u8],
) -> Vec<(u64, Vec<u8>)> {
    try_select_rows(addr, space_id, index_id, iterator, key)
        .unwrap_or_else(|message| panic!("{message}"))
}

/// Appends a SELECT (sync `sync`) of every tuple `iterator` finds by `key` in `space_id`'s
/// index `index_id`: no limit, no offset.
pub fn encode_select_all(
    out: &mut Vec<u8>,
    sync: u64,
    space_id: u32,
    index_id: u32,
    iterator: u32,
    key: &[u8],
) {
    tarn::protocol::client::encode_select(
        out,
        sync,
        &tarn::protocol::request::Select {
            space_id,
            index_id,
            limit: u32::MAX,
            offset: 0,
            iterator,
            key,
            fetch_position: false,
            after_position: None,
            after_tuple: None,
        },
    );
}

/// [`select_rows`], or the error message the server answered.
pub fn try_select_rows(
    addr: SocketAddr,
    space_id: u32,
    index_id: u32,
    iterator: u32,
    key: &[u8],
) -> Result<Vec<(u64, Vec<u8>)>, String> {
    use tarn::msgpack::{self, Value};
    let mut client = Client::connect_to(addr);
    let mut request = Vec::new();
    encode_select_all(&mut request, 1, space_id, index_id, iterator, key);
    client.send(&request);
    let packet = client.read_packet().expect("a select reply");
    let reply = tarn::protocol::client::decode_reply(&packet).expect("the reply decodes");
    if let Some(message) = reply.error_message() {
        return Err(message.to_string());
    }
    let mut data = reply.data().expect("data");
    let Ok(Value::Array(count)) = msgpack::read_value(&mut data) else {
        panic!("the rows are an array");
    };
    Ok((0..count)
        .map(|_| {
            let tuple = msgpack::take_value(&mut data).expect("a tuple").to_vec();
            let mut fields = &tuple[1..];
            let Ok(Value::Uint(id)) = msgpack::read_value(&mut fields) else {
                panic!("an id first: {tuple:?}");
            };
            (id, tuple)
        })
        .collect())
}

/// The ids of [`kv_rows`].
pub fn kv_ids(addr: SocketAddr) -> Vec<u64> {
    kv_rows(addr).into_iter().map(|(id, _)| id).collect()
}

/// [`kv_rows`] as (id, value): the tuples [`kv_tuple`] makes.
pub fn kv_values(addr: SocketAddr) -> Vec<(u64, String)> {
    use tarn::msgpack::{self, Value};
    kv_rows(addr)
        .into_iter()
        .map(|(id, tuple)| {
            let mut fields = &tuple[1..];
            let _id = msgpack::take_value(&mut fields).expect("an id");
            let _bucket_id = msgpack::take_value(&mut fields).expect("a bucket id");
            let Ok(Value::Str(text)) = msgpack::read_value(&mut fields) else {
                panic!("a string value: {tuple:?}");
            };
            (id, String::from_utf8_lossy(text).into_owned())
        })
        .collect()
}

/// A CALL of `function` with `args` (a msgpack array) on a new connection: its error
/// message, if it failed or the server is gone.
pub fn call(addr: SocketAddr, function: &str, args: &[u8]) -> Result<(), String> {
    call_on(&mut Client::connect_to(addr), function, args)
}

/// [`call`] on `client`.
pub fn call_on(client: &mut Client, function: &str, args: &[u8]) -> Result<(), String> {
    let mut request = Vec::new();
    tarn::protocol::client::encode_call(&mut request, 1, function, args);
    client
        .try_send(&request)
        .map_err(|error| error.to_string())?;
    let packet = client.read_packet().ok_or("no reply")?;
    let reply = tarn::protocol::client::decode_reply(&packet).map_err(|error| error.to_string())?;
    match reply.error_message() {
        Some(message) => Err(message.to_string()),
        None => Ok(()),
    }
}

/// `box.snapshot()`: its error message, if it failed.
pub fn snapshot(addr: SocketAddr) -> Result<(), String> {
    let mut client = Client::connect_to(addr);
    let mut request = Vec::new();
    tarn::protocol::client::encode_call(&mut request, 1, "box.snapshot", &[0x90]);
    client.send(&request);
    let packet = client.read_packet().expect("a snapshot reply");
    let reply = tarn::protocol::client::decode_reply(&packet).expect("the reply decodes");
    match reply.error_message() {
        Some(message) => Err(message.to_string()),
        None => Ok(()),
    }
}

/// The `tarantool` binary the differential test starts as its reference (Tarantool 2.6):
/// `$TARN_TARANTOOL`, else `tarantool` on PATH. Its absence is an error saying how to install
/// it, never a skipped test.
pub fn tarantool() -> Result<PathBuf, String> {
    let binary = match std::env::var_os("TARN_TARANTOOL") {
        Some(path) => PathBuf::from(path),
        None => std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join("tarantool"))
            .find(|path| path.is_file())
            .ok_or(
                "the differential test needs Tarantool 2.6 as its reference and found no \
                 `tarantool` on PATH: install Debian's (`apt-get install tarantool`, 2.6.0 on \
                 Debian 12; `bash .ci/run` does it), or set TARN_TARANTOOL to a 2.6 binary",
            )?,
    };
    let output = Command::new(&binary)
        .arg("--version")
        .output()
        .map_err(|error| format!("{} --version: {error}", binary.display()))?;
    let version = String::from_utf8_lossy(&output.stdout);
    if !version.starts_with("Tarantool 2.6.") {
        return Err(format!(
            "{} is {:?}; the differential test's known differences are Tarantool 2.6's: \
             install Debian 12's tarantool (2.6.0) or set TARN_TARANTOOL to a 2.6 binary",
            binary.display(),
            version.lines().next().unwrap_or("")
        ));
    }
    Ok(binary)
}

/// Every file and directory under `dir`, with the bytes of each file.
pub fn dir_contents(
    dir: &std::path::Path,
) -> std::collections::BTreeMap<std::path::PathBuf, Option<Vec<u8>>> {
    let mut found = std::collections::BTreeMap::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                found.insert(path.clone(), None);
                pending.push(path);
            } else {
                found.insert(path.clone(), Some(std::fs::read(&path).unwrap()));
            }
        }
    }
    found
}
