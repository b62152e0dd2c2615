//! A shard's synchronous writes with a real WAL: what a timed-out sync write's rollback
//! answers, what it leaves in memory, and what recovery of its log gives.

use super::*;
use crate::msgpack;
use crate::storage::{FieldDef, FieldType, IndexDef, KeyPart, SpaceDef, SpaceFormat};
use crate::wal::{GlommioSink, RecoveryConfig, WriterConfig};

const SYNC: u32 = 512;
const PLAIN: u32 = 513;

fn space(id: u32, is_sync: bool) -> SpaceDef {
    SpaceDef {
        id,
        name: format!("s{id}").into(),
        format: SpaceFormat::new(vec![FieldDef::new("id", FieldType::Unsigned)]),
        indexes: vec![IndexDef::tree(
            0,
            "primary",
            true,
            vec![KeyPart::new(0, FieldType::Unsigned)],
        )],
        is_sync,
    }
}

fn engine() -> Engine {
    let mut engine = Engine::new(1 << 26);
    engine.create_space(space(SYNC, true)).expect("sync space");
    engine
        .create_space(space(PLAIN, false))
        .expect("plain space");
    engine
}

fn tuple(id: u64, value: &str) -> Vec<u8> {
    let mut tuple = vec![0x92];
    msgpack::write_uint(&mut tuple, id);
    msgpack::write_str(&mut tuple, value.as_bytes());
    tuple
}

fn replace(shard: &mut Shard, space_id: u32, id: u64, value: &str) -> Commit {
    let change = shard
        .engine
        .space_mut(space_id)
        .and_then(|space| space.replace(&tuple(id, value)))
        .expect("replaced");
    shard.log(space_id, change).expect("logged").expect("a WAL")
}

/// What `space_id` holds, as `(id, value)`.
fn rows(engine: &Engine, space_id: u32) -> Vec<Vec<u8>> {
    let space = engine.space(space_id).expect("space");
    let all = space.select(0, 0, &[0x90]).expect("select all");
    all.map(|(_, tuple)| tuple.data().to_vec()).collect()
}

fn run<T>(future: impl std::future::Future<Output = T>) -> T {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(1 << 20)
        .make()
        .expect("executor")
        .run(future)
}

/// A WAL writer in `path` from LSN 1, without fsync.
fn start_wal(path: &std::path::Path) -> WalWriter {
    WalWriter::start(
        GlommioSink::new(path),
        WriterConfig {
            shard_id: 0,
            schema_fingerprint: 1,
            fsync: false,
            max_file_size_bytes: 1 << 20,
            lsn_next: 1,
        },
    )
}

#[test]
fn a_timed_out_sync_write_and_the_writes_behind_it_are_refused_undone_and_compensated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let (outcomes, undone, sync_rows, plain_rows) = run(async move {
        let wal = start_wal(&path);
        let mut shard = Shard::new(0, engine(), Some(wal.clone()));
        shard
            .sync_writes
            .store(true, std::sync::atomic::Ordering::Relaxed);
        replace(&mut shard, PLAIN, 1, "old")
            .await
            .expect("a plain write");
        let sync = replace(&mut shard, SYNC, 1, "x");
        let behind = replace(&mut shard, PLAIN, 1, "new");
        let new_key = replace(&mut shard, PLAIN, 2, "new key");
        assert_eq!(wal.limbo_len(), 1);
        while wal.lsn_durable_last() < new_key.lsn() {
            futures_lite::future::yield_now().await;
        }
        let rollback = wal.begin_sync_rollback().expect("pending and durable");
        let (compensated, undone) = shard.roll_back_sync(&rollback);
        let compensation = compensated.expect("logged").expect("rows");
        compensation.ignoring_fence().await.expect("durable");
        wal.finish_sync_rollback(rollback);
        let outcomes = [sync.await, behind.await, new_key.await];
        let kept = (rows(&shard.engine, SYNC), rows(&shard.engine, PLAIN));
        wal.close().await.expect("closed");
        (outcomes, undone, kept.0, kept.1)
    });
    assert!(
        matches!(outcomes[0], Err(WalError::SyncQuorumTimeout)),
        "{outcomes:?}"
    );
    assert!(
        matches!(outcomes[1], Err(WalError::SyncRollback)),
        "{outcomes:?}"
    );
    assert!(
        matches!(outcomes[2], Err(WalError::SyncRollback)),
        "{outcomes:?}"
    );
    assert_eq!(undone, 3);
    assert!(sync_rows.is_empty());
    assert_eq!(plain_rows, vec![tuple(1, "old")]);

    // The log holds the refused rows and, after them, the rows that undo them.
    let mut recovered = engine();
    let config = RecoveryConfig {
        dir: dir.path().to_path_buf(),
        shard_id: 0,
        schema_fingerprint: 1,
        force: false,
        schema_version_committed: 0,
    };
    crate::wal::recover(&config, &mut recovered).expect("recovered");
    assert!(rows(&recovered, SYNC).is_empty());
    assert_eq!(rows(&recovered, PLAIN), vec![tuple(1, "old")]);
}

#[test]
fn without_sync_writes_a_sync_space_waits_for_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let pending = run(async move {
        let wal = start_wal(&path);
        let mut shard = Shard::new(0, engine(), Some(wal.clone()));
        replace(&mut shard, SYNC, 1, "x")
            .await
            .expect("acknowledged");
        let pending = wal.limbo_len();
        wal.close().await.expect("closed");
        pending
    });
    assert_eq!(pending, 0);
}
