//! Packets decoded once. A pipelined run (one socket read, one batch from another core)
//! decodes each packet a few packets before it runs, to start its lookup early
//! ([`LookupPipeline`](crate::shard::prefetch::LookupPipeline)); the run keeps those
//! decodings here, so the packet is not decoded again when its turn comes. Decoding is a
//! tenth of a get's instructions.
//!
//! Knows nothing of what a packet means: it holds, by position, what was worked out for a
//! packet (its decoding, and on the accepting core where it runs: [`Routed`]).

use crate::placement::Destination;
use crate::protocol::header::Header;
use crate::protocol::request::Request;
use crate::protocol::PacketError;

/// A packet decoded: its header and request, or the error to answer instead.
pub type Decoded<'p> = Result<(Header, Request<'p>), PacketError>;

/// A packet decoded and routed, once: its decoding and where its request runs (`Here` for a
/// packet that did not decode: its error is answered here).
pub struct Routed<'p> {
    pub decoded: Decoded<'p>,
    pub route: Destination,
}

/// How far ahead of the running packet a decoding is kept. The fetch-ahead reads 8 local
/// lookups ahead, so about 16 packets on two cores; one that reads further (a long stretch
/// of packets for other cores) decodes those packets again in their turn.
pub const DECODED_AHEAD: usize = 32;

/// What was worked out for packets `running .. running + DECODED_AHEAD` of a run (`T`:
/// their decodings, say), by position.
pub struct DecodedAhead<T> {
    slots: [Option<(usize, T)>; DECODED_AHEAD],
}

impl<T> Default for DecodedAhead<T> {
    fn default() -> Self {
        DecodedAhead {
            slots: std::array::from_fn(|_| None),
        }
    }
}

impl<T> DecodedAhead<T> {
    /// Keeps what was worked out for packet `at` while packet `running` runs, if `at` is
    /// near enough.
    #[inline]
    pub fn keep(&mut self, running: usize, at: usize, kept: T) {
        debug_assert!(at >= running, "packet {at} decoded after it ran");
        if at < running + DECODED_AHEAD {
            self.slots[at % DECODED_AHEAD] = Some((at, kept));
        }
    }

    /// What was kept for packet `at`, which is about to run; `None` if nothing was. Left in
    /// place (a packet runs once): a reference saves moving it.
    #[inline]
    pub fn get(&self, at: usize) -> Option<&T> {
        match &self.slots[at % DECODED_AHEAD] {
            Some((kept_at, kept)) if *kept_at == at => Some(kept),
            _ => None,
        }
    }

    /// What was kept for packet `at`, which is about to run; `None` if nothing was.
    #[inline]
    pub fn take(&mut self, at: usize) -> Option<T> {
        let slot = &mut self.slots[at % DECODED_AHEAD];
        // The slot may hold another packet's: one that ran without taking it.
        match slot {
            Some((kept_at, _)) if *kept_at == at => slot.take().map(|(_, decoded)| decoded),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::request::Request;

    fn ping(sync: u64) -> Decoded<'static> {
        let header = Header {
            sync,
            ..Header::default()
        };
        Ok((header, Request::Ping))
    }

    fn sync_of(decoded: Option<Decoded<'_>>) -> Option<u64> {
        decoded.map(|d| d.expect("decoded").0.sync)
    }

    #[test]
    fn keeps_what_is_near_and_gives_each_packet_its_own() {
        let mut ahead = DecodedAhead::default();
        ahead.keep(0, 0, ping(100));
        ahead.keep(0, 5, ping(105));
        // Too far ahead of packet 0: not kept, decoded again in its turn.
        ahead.keep(0, DECODED_AHEAD, ping(999));
        assert_eq!(sync_of(ahead.take(0)), Some(100));
        assert_eq!(sync_of(ahead.take(0)), None, "taken once");
        assert_eq!(sync_of(ahead.take(DECODED_AHEAD)), None);
        // Packet 5's slot is shared with packet 5 + DECODED_AHEAD: each gets only its own.
        assert_eq!(sync_of(ahead.take(5 + DECODED_AHEAD)), None);
        ahead.keep(1, 6, ping(106));
        assert_eq!(sync_of(ahead.take(5)), Some(105));
        assert_eq!(sync_of(ahead.take(6)), Some(106));
    }
}
