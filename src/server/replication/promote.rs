//! `box.ctl.promote()` (`docs/replication.md`, "Promotion"): a replica becomes the writable
//! master of a new term once its applier has applied everything it received.
//!
//! The applier and a promotion meet at [`PromotionGate`]: the applier marks itself applying
//! while it is subscribed and ends its link when a promotion is asked; the promotion waits
//! for that, takes the next term ([`super::term::Terms::lead`]), forgets the replica's
//! position (its own writes follow now) and lifts read-only. From then on the applier only
//! watches its upstream's term, and tells it the new one: a former master that hears it
//! stops accepting writes. Knows nothing of sockets or packets.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::position::{Position, PositionError, POSITION_FILE};
use super::term::TermError;
use crate::server::Shared;

/// How long a promotion waits for the applier to finish what it is applying.
const APPLIER_STOP_WAIT: Duration = Duration::from_secs(10);
const APPLIER_STOP_POLL: Duration = Duration::from_millis(1);

/// Where a promotion and the applier meet. Both flags are sequentially consistent: the
/// applier sets `applying` and then reads `requested`, a promotion sets `requested` and
/// then reads `applying`, so at least one of them sees the other.
#[derive(Default)]
pub struct PromotionGate {
    requested: AtomicBool,
    applying: AtomicBool,
}

impl PromotionGate {
    /// The applier is about to apply what its upstream streams; false: a promotion is under
    /// way, and it must not.
    pub fn begin_applying(&self) -> bool {
        self.applying.store(true, Ordering::SeqCst);
        if self.requested.load(Ordering::SeqCst) {
            self.applying.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// The applier stopped applying (its link ended).
    pub fn end_applying(&self) {
        self.applying.store(false, Ordering::SeqCst);
    }

    /// Whether a promotion waits for the applier to stop.
    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }
}

/// Why `box.ctl.promote()` failed.
#[derive(Debug, thiserror::Error)]
pub enum PromoteError {
    #[error("the applier did not stop within {0:?}: try again")]
    ApplierBusy(Duration),
    #[error("cannot record the new term: {0}")]
    Term(#[from] TermError),
    #[error("cannot forget the replica's position: {0}")]
    Position(#[from] PositionError),
    /// Its copy of the master is not whole: as a master it would lack rows for good.
    #[error(
        "this replica has not finished copying its master: let the copy end (box.info.status \
         \"running\") before promoting it"
    )]
    Copying,
}

/// Makes this instance the writable master of a new term; the term. A writable instance
/// already leads its term: nothing changes.
pub async fn promote(shared: &Shared) -> Result<u64, PromoteError> {
    if !shared.is_read_only() {
        return Ok(shared.terms.current());
    }
    let gate = &shared.promotion;
    gate.requested.store(true, Ordering::SeqCst);
    let started = Instant::now();
    while gate.applying.load(Ordering::SeqCst) {
        if started.elapsed() > APPLIER_STOP_WAIT {
            gate.requested.store(false, Ordering::SeqCst);
            return Err(PromoteError::ApplierBusy(APPLIER_STOP_WAIT));
        }
        glommio::timer::sleep(APPLIER_STOP_POLL).await;
    }
    let promoted = match Position::copying(&shared.config.data_dir) {
        true => Err(PromoteError::Copying),
        false => lead(shared),
    };
    gate.requested.store(false, Ordering::SeqCst);
    let term = promoted?;
    let applied = shared
        .replication
        .upstream()
        .as_ref()
        .map(|upstream| format!("{:?}", upstream.applied));
    tracing::warn!(
        term,
        applied = applied.as_deref().unwrap_or("nothing"),
        "replication: promoted; this instance is the master and accepts writes"
    );
    Ok(term)
}

/// Takes the next term, forgets the position, lifts read-only.
fn lead(shared: &Shared) -> Result<u64, PromoteError> {
    let term = shared.terms.lead(true)?;
    forget_position(&shared.config.data_dir)?;
    shared.set_read_only(false);
    shared.update_sync_writes();
    Ok(term)
}

/// A master follows no one: the position of a master it followed no longer describes its
/// data once it writes. Removed (and said so) if there is one.
pub fn forget_position(data_dir: &Path) -> Result<(), PositionError> {
    if data_dir.join(POSITION_FILE).exists() {
        Position::remove(data_dir)?;
        tracing::info!(
            file = POSITION_FILE,
            "this instance accepts writes: the position of the master it followed is removed"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_lets_exactly_one_side_pass() {
        let gate = PromotionGate::default();
        assert!(gate.begin_applying());
        gate.requested.store(true, Ordering::SeqCst);
        assert!(gate.applying.load(Ordering::SeqCst), "the promotion waits");
        gate.end_applying();
        assert!(
            !gate.begin_applying(),
            "no applying while a promotion is asked"
        );
        assert!(!gate.applying.load(Ordering::SeqCst));
    }
}
