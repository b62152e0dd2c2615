//! A read-only instance (`--read-only`, Tarantool's `read_only`): the real binary, restarted
//! read-only on data written before, refuses every client write with ER_READONLY (7) and
//! Tarantool 2.6's text (`docs/tarantool-reference.md` (p)) — an IPROTO insert, a
//! `box.space` write and a DDL over CALL, crud's writes in crud's error shape with the box
//! error inside — serves reads, and says `ro = true` in `box.info`. Then
//! `tests/python/test_read_only.py` through the Python connector. In process: the state
//! changes while the server runs, and an exempt session writes.

use crate::common::{self, Client, Server};
use std::process::Command;
use tarn::config::{Config, SHIPPED_CONFIG_TOML};
use tarn::crud::mp;
use tarn::msgpack::{write_array_len, write_str, write_uint};
use tarn::protocol::client::{self, decode_reply};
use tarn::protocol::frame::split_frame;
use tarn::server::session::Session;
use tarn::server::start_cores;
use tarn::storage::text::msgpack_to_text;

const KV: u32 = 512;
const READ_ONLY: &str = "Can't modify data because this instance is in read-only mode.";

/// What a request answered: `Ok(data as text)`, or `Err((code, message))` after checking that
/// the error stack's top entry says the same, as a ClientError.
fn answer(client: &mut Client, request: &[u8]) -> Result<String, (u32, String)> {
    client.send(request);
    let packet = client.read_packet().expect("a reply");
    let reply = decode_reply(&packet).expect("the reply decodes");
    let Some(code) = reply.error_code() else {
        return Ok(msgpack_to_text(reply.data().expect("data")));
    };
    let message = reply.error_message().expect("a message").to_string();
    let (type_name, top_message, top_code) = reply.error_top().expect("an error stack");
    assert_eq!(
        (type_name, top_message, top_code),
        ("ClientError", &*message, code.0.into())
    );
    Err((code.0, message))
}

fn call(client: &mut Client, function: &str, args: &[u8]) -> Result<String, (u32, String)> {
    let mut request = Vec::new();
    client::encode_call(&mut request, 1, function, args);
    answer(client, &request)
}

fn refused() -> Result<String, (u32, String)> {
    Err((7, READ_ONLY.to_string()))
}

/// `[[id, id, value]]`: one kv tuple as a CALL's only argument.
fn tuple_argument(id: u64, value: &str) -> Vec<u8> {
    let mut args = vec![0x91];
    args.extend_from_slice(&common::kv_tuple(id, value));
    args
}

/// Writes kv row 1 on a writable start, then restarts the same data directory read-only.
fn read_only_server(dir: &std::path::Path) -> Server {
    let writable = Server::start_in(dir, 2, common::TEST_CONFIG_EXTRA, &[]);
    let mut client = Client::connect(&writable);
    let mut insert = Vec::new();
    client::encode_insert(&mut insert, 1, KV, &common::kv_tuple(1, "kept"));
    assert!(answer(&mut client, &insert).is_ok());
    drop(client);
    assert_eq!(writable.stop(), Some(0));
    Server::start_in(dir, 2, common::TEST_CONFIG_EXTRA, &["--read-only"])
}

#[test]
fn a_read_only_instance_refuses_writes_as_tarantool_and_serves_reads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = read_only_server(dir.path());
    let mut guest = Client::connect(&server);

    let mut insert = Vec::new();
    client::encode_insert(&mut insert, 2, KV, &common::kv_tuple(2, "new"));
    assert_eq!(answer(&mut guest, &insert), refused());
    // A missing space is 36 before the read-only check, as in Tarantool.
    let mut missing = Vec::new();
    client::encode_insert(&mut missing, 3, 9999, &common::kv_tuple(2, "new"));
    assert_eq!(
        answer(&mut guest, &missing),
        Err((36, "Space '9999' does not exist".into()))
    );
    assert_eq!(
        call(&mut guest, "box.space.kv:replace", &tuple_argument(1, "z")),
        refused()
    );

    // crud keeps its shape: `[nil, InsertError]` with the box error inside.
    let mut args = Vec::new();
    write_array_len(&mut args, 2);
    write_str(&mut args, b"kv");
    write_array_len(&mut args, 3);
    write_uint(&mut args, 2);
    args.push(0xc0); // bucket_id nil: crud computes it
    write_str(&mut args, b"new");
    let mut request = Vec::new();
    client::encode_call(&mut request, 4, "crud.insert", &args);
    guest.send(&request);
    let packet = guest.read_packet().expect("a reply");
    let reply = decode_reply(&packet).expect("the reply decodes");
    assert!(!reply.is_error());
    let values = mp::array_items(reply.data().expect("data")).expect("values");
    assert!(mp::is_nil(values[0]));
    let error = mp::map_items(values[1]).expect("crud's error object");
    let field = |name: &str| {
        let (_, value) = error
            .iter()
            .find(|(key, _)| mp::as_str(key) == Some(name))
            .unwrap_or_else(|| panic!("no {name}"));
        mp::as_str(value).expect("a string")
    };
    assert_eq!(field("class_name"), "InsertError");
    assert_eq!(field("err"), format!("Failed to insert: {READ_ONLY}"));
    assert_eq!(
        field("str"),
        format!("InsertError: Failed to insert: {READ_ONLY}")
    );

    // DDL: for a user with the write grant too.
    let mut bench = Client::connect_as(&server, "bench", "secret");
    let mut args = Vec::new();
    write_array_len(&mut args, 1);
    write_str(&mut args, b"ro_made");
    assert_eq!(
        call(&mut bench, "box.schema.space.create", &args),
        refused()
    );

    // Reads.
    assert_eq!(
        common::kv_rows(server.addr),
        vec![(1, common::kv_tuple(1, "kept"))]
    );
    let info = call(&mut guest, "box.info", &[0x90]).expect("box.info");
    assert!(info.contains(r#""ro": true"#), "{info}");
    assert!(info.contains(r#""status": "running""#), "{info}");

    run_pytest(&server);
    assert_eq!(server.stop(), Some(0));
}

/// `tests/python/test_read_only.py` against the read-only server.
fn run_pytest(server: &Server) {
    let Some(python) = common::python() else {
        if std::env::var_os("CI").is_some() {
            panic!("CI must provide the Python connector (TARN_PYTHON or .venv)");
        }
        eprintln!("skipping the Python part: no Python with the tarantool connector");
        return;
    };
    let status = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/test_read_only.py"
        ))
        .env("TARN_ADDR", server.addr.to_string())
        .status()
        .expect("run pytest");
    assert!(
        status.success(),
        "test_read_only.py failed against tarn --read-only"
    );
}

/// The code of a session's reply to `packet` (0 for success), and its data or message as
/// text.
async fn reply_to(session: &mut Session, encoded: &[u8]) -> (u32, String) {
    let (packet, _) = split_frame(encoded).expect("frame").expect("whole");
    let mut out = Vec::new();
    session.handle_packet(packet, &mut out).await;
    let (reply, _) = client::split_server_frame(&out)
        .expect("frame")
        .expect("whole");
    let reply = decode_reply(reply).expect("the reply decodes");
    match reply.error_code() {
        Some(code) => (code.0, reply.error_message().unwrap_or_default().into()),
        None => (0, msgpack_to_text(reply.data().unwrap_or(&[0x90]))),
    }
}

/// The read-only state is the server's, changed while it runs (a promotion will clear it):
/// `box.info.ro` and the refusals follow it at once, and a session made exempt (a replica's
/// applier) writes while it is set.
#[test]
fn the_read_only_state_changes_at_run_time_and_an_exempt_session_writes() {
    let mut config = Config::from_toml_str(SHIPPED_CONFIG_TOML).expect("shipped config");
    config.data_dir = tempfile::tempdir().expect("data dir").keep();
    config.durability.wal_mode = tarn::config::WalMode::None;
    config.read_only = true;
    let outcomes = start_cores(config, 2, |core| async move {
        if core.id() != 0 {
            return Vec::new();
        }
        let mut client_session = Session::new(core.clone());
        let mut applier = Session::new(core.clone());
        applier.set_writes_despite_read_only(true);
        let insert = |sync: u64, id: u64| {
            let mut out = Vec::new();
            client::encode_insert(&mut out, sync, KV, &common::kv_tuple(id, "v"));
            out
        };
        let mut info = Vec::new();
        client::encode_call(&mut info, 9, "box.info", &[0x90]);
        let mut seen = Vec::new();
        // Keys 1..=4: both shards own some, so hops are refused before they are routed.
        for id in 1..=4 {
            seen.push(reply_to(&mut client_session, &insert(id, id)).await.0);
        }
        seen.push(reply_to(&mut applier, &insert(5, 5)).await.0);
        seen.push(reply_to(&mut applier, &insert(6, 6)).await.0);
        let ro = |text: &str| u32::from(text.contains(r#""ro": true"#));
        seen.push(ro(&reply_to(&mut client_session, &info).await.1));
        core.shared.set_read_only(false);
        seen.push(reply_to(&mut client_session, &insert(7, 7)).await.0);
        seen.push(ro(&reply_to(&mut client_session, &info).await.1));
        core.shared.set_read_only(true);
        seen.push(reply_to(&mut client_session, &insert(8, 8)).await.0);
        seen
    })
    .expect("the cores ran");
    // 7 for each client write while read-only; 0 for the exempt session's and for the
    // write after the flag was cleared; box.info's ro 1, then 0.
    assert_eq!(outcomes[0], [7, 7, 7, 7, 0, 0, 1, 0, 0, 7]);
}
