//! Synchronous replication on a master (Tarantool's limbo, `docs/replication.md`): per shard,
//! a task that, while sync rows are pending in the shard's WAL writer, confirms them once a
//! quorum of instances has them, and rolls back the oldest (and every write after it) once it
//! has waited `replication_synchro_timeout`.
//!
//! Owns when a pending row is confirmed or rolled back. Knows nothing of how rows are held
//! (`wal::writer`), undone (`shard::undo`) or streamed (the relay): replicas' acknowledgements
//! arrive through `status` from the relays' threads, read here with atomics, since wakers of
//! this core must not be woken from those threads.

use std::rc::Rc;
use std::time::Duration;

use crate::config::Config;
use crate::server::mesh::core::Core;
use crate::wal::WalWriter;

/// How often a shard with sync rows pending looks at its replicas' acknowledgements: a
/// replica on the same network acknowledges within ~100 µs of its fsync, so this adds at most
/// that much to a sync write's latency; it costs nothing while nothing is pending.
const CHECK_EVERY: Duration = Duration::from_micros(150);

/// Whether writes to `is_sync` spaces may wait for a quorum here: a quorum over 1 and a
/// WAL. They do while this instance is the master of the current term
/// ([`crate::server::Shared::update_sync_writes`]): a replica applies what its master logged,
/// and its own quorum would count replicas it does not have.
pub fn may_hold_sync_writes(config: &Config) -> bool {
    config.synchro.quorum > 1 && config.durability.wal_mode != crate::config::WalMode::None
}

/// Gives the core's shard the instance's sync-writes switch and starts its limbo task, when
/// [`may_hold_sync_writes`].
pub fn start(core: &Rc<Core>) {
    if !may_hold_sync_writes(&core.shared.config) {
        return;
    }
    let mut shard = core.shard.borrow_mut();
    let Some(wal) = shard.wal.clone() else {
        return;
    };
    shard.sync_writes = core.shared.sync_writes.clone();
    glommio::spawn_local(run(core.clone(), wal)).detach();
}

/// The shard's limbo task: idle until a sync row is pending, then every [`CHECK_EVERY`]
/// confirms what a quorum has, or rolls back what waited too long.
async fn run(core: Rc<Core>, wal: WalWriter) {
    let shard_id = core.id();
    let synchro = core.shared.config.synchro;
    let quorum = synchro.quorum as usize;
    loop {
        wal.limbo_pending().await;
        glommio::timer::sleep(CHECK_EVERY).await;
        let Some((oldest, since)) = wal.limbo_oldest() else {
            continue;
        };
        let replication = &core.shared.replication;
        let quorum_lsn = replication.quorum_lsn(shard_id, wal.lsn_durable_last(), quorum);
        if quorum_lsn >= oldest {
            wal.confirm(quorum_lsn);
            continue;
        }
        if since.elapsed() >= synchro.timeout {
            roll_back(&core, &wal).await;
        }
    }
}

/// Rolls back the oldest pending sync row and every write after it: undone in memory and
/// compensated in the log, and their writers answered only once the compensating rows are
/// durable. If the log refuses those rows the writer is stopped (the rolled-back rows would
/// come back at restart otherwise, and memory no longer matches the log).
async fn roll_back(core: &Rc<Core>, wal: &WalWriter) {
    let Some(rollback) = wal.begin_sync_rollback() else {
        return;
    };
    let (compensated, undone) = core.shard.borrow_mut().roll_back_sync(&rollback);
    let outcome = match compensated {
        Ok(Some(commit)) => commit.ignoring_fence().await.map(|_| ()),
        Ok(None) => Ok(()),
        Err(error) => Err(error),
    };
    tracing::warn!(
        shard = core.id(),
        lsn = rollback.lsn_first,
        writes_undone = undone,
        "a synchronous write did not reach replication_synchro_quorum in \
         replication_synchro_timeout: it and every write after it are rolled back"
    );
    if let Err(error) = outcome {
        tracing::error!(
            shard = core.id(),
            %error,
            "the WAL refused the rows that undo a synchronous rollback"
        );
        wal.stop(format!(
            "the rows undoing a timed-out synchronous write were not logged: {error}"
        ));
    }
    wal.finish_sync_rollback(rollback);
}
