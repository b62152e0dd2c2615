//! Two cores flooding each other through channels of one message never deadlock: sends that
//! find a channel full wait on an ordered backlog, never in a receive loop. Built the manual
//! way (a `LocalExecutorPoolBuilder`, a mesh, `Core::join` in each executor), which is what
//! `server::start_cores` does for tools.

use futures_lite::future::yield_now;
use glommio::{LocalExecutorPoolBuilder, PoolPlacement};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tarn::config::{Config, SHIPPED_CONFIG_TOML};
use tarn::msgpack::{write_array_len, write_str, write_uint};
use tarn::protocol::client::{self, decode_reply, split_server_frame};
use tarn::protocol::frame::split_frame;
use tarn::server::mesh::core::{mesh_with_capacity, Core, MeshStats};
use tarn::server::session::Session;
use tarn::server::Shared;
use tarn::storage::key::SearchKeyBuf;

const SESSIONS_PER_CORE: u64 = 40;
const PIPELINE_DEPTH: u64 = 1500;

fn kv_tuple(id: u64) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 3);
    write_uint(&mut out, id);
    write_uint(&mut out, id % 3000);
    write_str(
        &mut out,
        format!("flood-{id:012}-{}", "x".repeat(40)).as_bytes(),
    );
    out
}

fn owner_of(core: &Core, id: u64) -> usize {
    let mut key = Vec::new();
    write_array_len(&mut key, 1);
    write_uint(&mut key, id);
    let shard = core.shard.borrow();
    let space = shard.engine.space(512).unwrap();
    let mut encoded = SearchKeyBuf::new();
    space.indexes()[0]
        .def
        .key_def
        .encode_search_key(&key, &mut encoded)
        .unwrap();
    tarn::placement::shard_of_key(&encoded, core.shard_count)
}

/// One session replaces `PIPELINE_DEPTH` keys owned by the other core in one pipeline and
/// checks every reply.
async fn flood(core: Rc<Core>, session_no: u64) {
    let first = (core.id() as u64 * SESSIONS_PER_CORE + session_no) * 1_000_000;
    let other = 1 - core.id();
    let ids: Vec<u64> = (first..)
        .filter(|&id| owner_of(&core, id) == other)
        .take(PIPELINE_DEPTH as usize)
        .collect();
    let packets: Vec<Vec<u8>> = ids
        .iter()
        .enumerate()
        .map(|(sync, &id)| {
            let mut framed = Vec::new();
            client::encode_replace(&mut framed, sync as u64, 512, &kv_tuple(id));
            split_frame(&framed).unwrap().unwrap().0.to_vec()
        })
        .collect();
    let mut session = Session::new(core);
    let mut out = Vec::new();
    for packet in &packets {
        session.submit(packet, &mut out).await;
    }
    session.finish(&mut out).await;
    let mut rest = &out[..];
    for (sync, &id) in ids.iter().enumerate() {
        let (packet, used) = split_server_frame(rest).unwrap().expect("a reply");
        rest = &rest[used..];
        let reply = decode_reply(packet).unwrap();
        assert_eq!(reply.sync(), sync as u64);
        assert!(!reply.is_error(), "{:?}", reply.error_message());
        assert!(reply.data().unwrap().ends_with(&kv_tuple(id)));
    }
    assert!(rest.is_empty());
}

#[test]
fn two_cores_flooding_each_other_through_full_channels_finish() {
    let mut config = Config::from_toml_str(SHIPPED_CONFIG_TOML).unwrap();
    let data_dir = tempfile::tempdir().unwrap();
    config.data_dir = data_dir.path().to_path_buf();
    config.durability.wal_mode = tarn::config::WalMode::None;
    // No data directory is prepared: a fresh one has nothing to recover, and no WAL runs.
    let shared = Arc::new(Shared::new(config, 2, 0));
    let mesh = mesh_with_capacity(2, 1);
    let finished = Arc::new(AtomicUsize::new(0));
    let handles = LocalExecutorPoolBuilder::new(PoolPlacement::MaxSpread(2, None))
        .on_all_shards(move || {
            let (shared, mesh, finished) = (shared.clone(), mesh.clone(), finished.clone());
            async move {
                let core = Core::join(shared, mesh).await.expect("core");
                let tasks: Vec<_> = (0..SESSIONS_PER_CORE)
                    .map(|session_no| glommio::spawn_local(flood(core.clone(), session_no)))
                    .collect();
                for task in tasks {
                    task.await;
                }
                let stats = core.stats();
                // Keep serving the other core until it is done too.
                finished.fetch_add(1, Ordering::AcqRel);
                while finished.load(Ordering::Acquire) < 2 {
                    glommio::timer::sleep(Duration::from_millis(1)).await;
                    yield_now().await;
                }
                stats
            }
        })
        .unwrap();
    let stats: Vec<MeshStats> = handles
        .join_all()
        .into_iter()
        .map(|result| result.expect("core thread"))
        .collect();
    eprintln!("{stats:#?}");
    for core in &stats {
        assert_eq!(core.requests_sent, SESSIONS_PER_CORE * PIPELINE_DEPTH);
        assert!(
            core.backlogged > 0,
            "the channels were never full: {core:?}"
        );
    }
}
