//! What each user sees of the schema, as Tarantool 2.6 shows it (docs/tarantool-reference.md,
//! "Schema views"): `_space` and `_index` need the read grant (else error 42), while the views
//! `_vspace` and `_vindex` are open to everyone but show a user only what it may use: the
//! views themselves, and the user spaces once it may read or write them.

use crate::common;

use common::{Client, Server};
use tarn::msgpack::{self, Value};
use tarn::protocol::client::{self, decode_reply};
use tarn::protocol::request::Select;
use tarn::protocol::ErrorCode;

const USERS: &str = r#"
[[user]]
name = "reader"
password = "r"
grants = ["read"]

[[user]]
name = "writer"
password = "w"
grants = ["write"]

[[user]]
name = "caller"
password = "c"
grants = ["execute"]
"#;

/// (space id, index id) of every `_vindex` row the writer sees: the views' indexes and the
/// user spaces' (the shipped kv has one index, customers three); `_vindex` has indexes 0
/// and 2, as in Tarantool.
const WRITER_VINDEX: [(u64, u64); 9] = [
    (281, 0),
    (281, 1),
    (281, 2),
    (289, 0),
    (289, 2),
    (512, 0),
    (513, 0),
    (513, 1),
    (513, 2),
];

const SPACE: u32 = 280;
const VSPACE: u32 = 281;
const INDEX: u32 = 288;
const VINDEX: u32 = 289;

/// The first two fields of every row a select returns (space id, and index id or owner),
/// or the error code and message.
fn select(
    client: &mut Client,
    space_id: u32,
    index_id: u32,
    key: &[u8],
) -> Result<Vec<(u64, u64)>, (ErrorCode, String)> {
    let select = Select {
        space_id,
        index_id,
        limit: u32::MAX,
        offset: 0,
        iterator: if key == [0x90] { 2 } else { 0 },
        key,
        fetch_position: false,
        after_position: None,
        after_tuple: None,
    };
    let mut request = Vec::new();
    client::encode_select(&mut request, 7, &select);
    client.send(&request);
    let packet = client.read_packet().expect("a reply");
    let reply = decode_reply(&packet).expect("decodes");
    if let Some(code) = reply.error_code() {
        return Err((code, reply.error_message().unwrap_or_default().to_string()));
    }
    let mut data = reply.data().expect("data");
    let Ok(Value::Array(count)) = msgpack::read_value(&mut data) else {
        panic!("rows");
    };
    Ok((0..count)
        .map(|_| {
            let mut row = msgpack::take_value(&mut data).expect("a row");
            let _ = msgpack::read_value(&mut row);
            let mut field = || match msgpack::read_value(&mut row) {
                Ok(Value::Uint(value)) => value,
                other => panic!("{other:?}"),
            };
            (field(), field())
        })
        .collect())
}

fn space_ids(rows: Vec<(u64, u64)>) -> Vec<u64> {
    rows.into_iter().map(|(id, _)| id).collect()
}

fn denied(space: &str, user: &str) -> Result<Vec<(u64, u64)>, (ErrorCode, String)> {
    Err((
        ErrorCode::ER_ACCESS_DENIED,
        format!("Read access to space '{space}' is denied for user '{user}'"),
    ))
}

fn name_key(name: &str) -> Vec<u8> {
    let mut key = Vec::new();
    msgpack::write_array_len(&mut key, 1);
    msgpack::write_str(&mut key, name.as_bytes());
    key
}

#[test]
fn each_user_sees_only_what_it_may_use_of_the_schema() {
    // The shipped config with a guest that may do nothing.
    let shipped = include_str!("../conf/tarn.toml")
        .replace("grants = [\"read\", \"write\", \"execute\"]", "grants = []");
    let dir = tempfile::tempdir().expect("dir");
    let server =
        Server::try_start_with(dir.path(), &format!("{shipped}\n{USERS}"), 2, &[]).expect("starts");
    const ALL: &[u8] = &[0x90];

    for (user, client) in [
        ("guest", Client::connect(&server)),
        ("caller", Client::connect_as(&server, "caller", "c")),
    ] {
        let mut client = client;
        assert_eq!(select(&mut client, SPACE, 0, ALL), denied("_space", user));
        assert_eq!(select(&mut client, INDEX, 0, ALL), denied("_index", user));
        assert_eq!(
            select(&mut client, VSPACE, 0, ALL).map(space_ids),
            Ok(vec![281, 289])
        );
        let vindex = select(&mut client, VINDEX, 0, ALL).map(space_ids).unwrap();
        assert!(
            !vindex.is_empty() && vindex.iter().all(|id| [281, 289].contains(id)),
            "{vindex:?}"
        );
        assert_eq!(select(&mut client, VSPACE, 2, &name_key("kv")), Ok(vec![]));
        assert_eq!(select(&mut client, 512, 0, ALL), denied("kv", user));
    }

    let mut writer = Client::connect_as(&server, "writer", "w");
    assert_eq!(
        select(&mut writer, SPACE, 0, ALL),
        denied("_space", "writer")
    );
    assert_eq!(
        select(&mut writer, VSPACE, 0, ALL).map(space_ids),
        Ok(vec![281, 289, 512, 513])
    );
    assert_eq!(
        select(&mut writer, VINDEX, 0, ALL),
        Ok(WRITER_VINDEX.to_vec())
    );
    assert_eq!(
        select(&mut writer, VSPACE, 2, &name_key("kv")).map(space_ids),
        Ok(vec![512])
    );

    // The read grant shows everything, the system spaces included.
    let mut reader = Client::connect_as(&server, "reader", "r");
    let every_space = vec![280, 281, 288, 289, 512, 513];
    assert_eq!(
        select(&mut reader, SPACE, 0, ALL).map(space_ids),
        Ok(every_space.clone())
    );
    assert_eq!(
        select(&mut reader, VSPACE, 0, ALL).map(space_ids),
        Ok(every_space)
    );
}
