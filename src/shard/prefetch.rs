//! Software pipelining of point lookups over a run of requests that are all known up
//! front (what one socket read or one cross-core batch brings).
//!
//! At a million tuples a point request waits on cache misses in series: the B+tree's
//! internal nodes below the root, the leaf's keys and values, the tuple. Alone, a core can
//! do nothing during them. In a run of requests, though, the keys of the next ones are
//! already in the buffer, so each request's loads are started a few requests before it
//! runs, one stage at a time (each stage reads what the previous one fetched): by the time
//! a request runs, its lookup hits cache, and the misses of several requests overlap
//! instead of adding up.
//!
//! Owns the distances and the ring of targets; knows nothing of packets or routing (the
//! caller says which requests are local point requests and what their keys are).

use crate::protocol::RequestTarget;
use crate::shard::{ScanPart, Shard};
use crate::storage::btree::LookupCursor;
use crate::storage::Engine;

/// A point request's lookup as far as prefetching knows it: an unsigned key in an index
/// keyed by one unsigned part (the common primary key), and how far its path has been
/// fetched.
#[derive(Debug, Clone, Copy)]
pub struct PointTarget {
    pub space_id: u32,
    pub index_id: u32,
    pub key: u64,
    /// `None` before the walk starts, or when there is no path to walk (a hash index, a
    /// space that is gone). Kept once the walk is done: where it found the key, the request
    /// reads the entry there (`Shard::execute`'s `fetched`).
    pub cursor: Option<LookupCursor>,
}

impl PointTarget {
    /// Where the lookup of a point request on `target` will search, when it searches an
    /// index keyed by one unsigned part with an unsigned key: what [`LookupPipeline`]
    /// fetches ahead. `None` for every other target.
    #[inline]
    pub fn of(target: &RequestTarget<'_>, engine: &Engine) -> Option<PointTarget> {
        let single_uint = crate::msgpack::single_uint_array;
        let (space_id, index_id, key) = match *target {
            RequestTarget::Read {
                space_id,
                index_id,
                key,
                ..
            }
            | RequestTarget::Key {
                space_id,
                index_id,
                key,
            } => (space_id, index_id, single_uint(key)?),
            RequestTarget::Tuple { space_id, tuple } => {
                let space = engine.find_space(space_id)?;
                (space_id, 0, space.leading_primary_key(tuple)?)
            }
            RequestTarget::NoData | RequestTarget::Procedure => return None,
        };
        Some(PointTarget::new(space_id, index_id, key))
    }

    /// Where a scan part starts, when it starts from an unsigned key: its walk fetches the
    /// path to that place, which the scan then finds in cache.
    #[inline]
    pub fn of_scan(part: &ScanPart<'_>) -> Option<PointTarget> {
        let key = crate::msgpack::single_uint_array(part.key)?;
        Some(PointTarget::new(part.space_id, part.index_id, key))
    }

    pub fn new(space_id: u32, index_id: u32, key: u64) -> PointTarget {
        PointTarget {
            space_id,
            index_id,
            key,
            cursor: None,
        }
    }
}

/// How many local point requests before it runs a request's lookup starts. Each local
/// request that runs takes every lookup in flight one load further, so a lookup gets this
/// many steps, a request's worth of work apart (a few hundred nanoseconds, about one memory
/// latency). A path at a million keys (four levels) takes eight: each of three internal
/// nodes' keys, then child slot; the leaf's keys and values together; then the tuple, with
/// one request of lead. Measured in process at a million keys, 8 is a sharp optimum: 6 and 9
/// both cost a fifth more per get (too few steps; too many lines in flight).
const LEAF_AHEAD: usize = 8;
/// A power of two above `LEAF_AHEAD`, so that a position maps to a slot with a mask.
const RING_SLOTS: usize = 16;
const _: () = assert!(RING_SLOTS.is_power_of_two() && RING_SLOTS > LEAF_AHEAD);

/// What a run holds at one position, as [`LookupPipeline::before_running`] asks for it.
#[derive(Debug, Clone, Copy)]
pub enum Ahead {
    /// A local point request, with its lookup.
    Lookup(PointTarget),
    /// Another request: for another core, not a point request, or not decodable.
    Other,
    /// Past the end of the run.
    End,
}

/// A lookup started for the request at `at` of the run.
#[derive(Debug, Clone, Copy)]
struct Started {
    at: usize,
    target: PointTarget,
}

/// The lookups of the next `LEAF_AHEAD` local point requests of a run, oldest first.
///
/// Use: before running request `i` of a run (`i` = 0, 1, 2, …), call
/// [`LookupPipeline::before_running`]. Only local point requests count: requests for other
/// cores cost a copy, not a lookup, so a step per request of any kind would leave a lookup
/// too little time per step where half the requests hop (two shards).
#[derive(Debug, Default)]
pub struct LookupPipeline {
    started: [Option<Started>; RING_SLOTS],
    /// Counts of lookups started and run (or dropped); `run..started_count` are in flight.
    started_count: usize,
    run: usize,
    /// The next position of the run to ask about, and whether the run ended before it.
    scanned: usize,
    ended: bool,
    /// Off for a shard whose data fits in the cache, where fetching ahead would only cost
    /// instructions; then nothing is fetched.
    enabled: bool,
}

/// Below this many bytes of tuples a shard's data stays in cache, lookups hit it anyway,
/// and fetching ahead is not worth its instructions (about 700 per request). The last-level
/// cache (32 MiB here) is shared by every shard and, on a VM, by the neighbours: at 1M keys
/// on two shards, about 20 MiB each, fetching ahead made gets 47% faster in process.
const FETCH_AHEAD_FROM_BYTES: u64 = 4 << 20;

impl LookupPipeline {
    /// A pipeline for one run of requests on `shard`.
    pub fn for_shard(shard: &Shard) -> LookupPipeline {
        LookupPipeline {
            enabled: shard.engine.quota().used_bytes() >= FETCH_AHEAD_FROM_BYTES,
            ..LookupPipeline::default()
        }
    }

    /// Whether it fetches anything: callers skip working out targets when not.
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Issues what is due before request `running` of the run starts, and returns its
    /// lookup when it is a local point request (walked as far as the pipeline got).
    /// `ahead(i)` says what request `i` is; it is called with 0, 1, 2, … in order, each
    /// index once, so it may walk the run with an iterator.
    #[inline]
    pub fn before_running(
        &mut self,
        shard: &Shard,
        running: usize,
        mut ahead: impl FnMut(usize) -> Ahead,
    ) -> Option<PointTarget> {
        if !self.enabled {
            return None;
        }
        if running == 0 {
            // As if the first `LEAF_AHEAD` had each been started a request apart.
            while self.in_flight() < LEAF_AHEAD {
                self.step_all(shard);
                if !self.start_next(shard, &mut ahead) {
                    break;
                }
            }
        }
        // A slot is emptied when its request runs, so the oldest slot is `None` exactly when
        // nothing is in flight.
        let oldest_at = self.started[self.run % RING_SLOTS]?.at;
        debug_assert!(oldest_at >= running, "requests run in order");
        if oldest_at != running {
            return None;
        }
        // Every lookup in flight, this request's too, takes a step; then one more starts.
        self.step_all(shard);
        let oldest = self.started[self.run % RING_SLOTS].take()?;
        self.run += 1;
        self.start_next(shard, &mut ahead);
        Some(oldest.target)
    }

    #[inline]
    fn step_all(&mut self, shard: &Shard) {
        for position in self.run..self.started_count {
            if let Some(started) = &mut self.started[position % RING_SLOTS] {
                shard.prefetch_step(&mut started.target);
            }
        }
    }

    fn in_flight(&self) -> usize {
        self.started_count - self.run
    }

    /// Asks about positions until one is a local point request, and starts its lookup;
    /// false once the run has ended.
    #[inline]
    fn start_next(&mut self, shard: &Shard, ahead: &mut impl FnMut(usize) -> Ahead) -> bool {
        while !self.ended {
            let at = self.scanned;
            self.scanned += 1;
            match ahead(at) {
                Ahead::Lookup(mut target) => {
                    shard.prefetch_start(&mut target);
                    debug_assert!(self.in_flight() < RING_SLOTS);
                    self.started[self.started_count % RING_SLOTS] = Some(Started { at, target });
                    self.started_count += 1;
                    return true;
                }
                Ahead::Other => {}
                Ahead::End => self.ended = true,
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msgpack;
    use crate::protocol::request::{Delete, Insert, Request, Select};
    use crate::storage::{Engine, FieldDef, FieldType, IndexDef, KeyPart, SpaceDef, SpaceFormat};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    const KV: u32 = 512;
    /// Enough keys for a tree of three levels, so a path has every kind of step.
    const KEYS: u64 = 100_000;

    fn kv_shard() -> Shard {
        let mut engine = Engine::new(1 << 30);
        engine
            .create_space(SpaceDef {
                id: KV,
                name: "kv".into(),
                format: SpaceFormat::new(vec![FieldDef::new("id", FieldType::Unsigned)]),
                indexes: vec![IndexDef::tree(
                    0,
                    "primary",
                    true,
                    vec![KeyPart::new(0, FieldType::Unsigned)],
                )],
                is_sync: false,
            })
            .expect("kv");
        let space = engine.space_mut(KV).expect("kv");
        for id in 0..KEYS {
            let mut tuple = vec![0x91];
            msgpack::write_uint(&mut tuple, id);
            space.insert(&tuple).expect("insert");
        }
        Shard::new(0, engine, None)
    }

    /// Runs `requests` requests through a pipeline, where request `i` is a point lookup of
    /// `key_of(i)` or, where that is `None`, another request (one for another core), and
    /// checks that each lookup was walked to its end by the time its request runs (or
    /// found nothing to walk), and that no other request is handed a lookup.
    fn run(shard: &Shard, requests: u64, key_of: impl Fn(u64) -> Option<u64>) {
        let ahead = |at: u64| match (at < requests, key_of(at)) {
            (false, _) => Ahead::End,
            (true, Some(key)) => Ahead::Lookup(PointTarget::new(KV, 0, key)),
            (true, None) => Ahead::Other,
        };
        let mut pipeline = LookupPipeline {
            enabled: true,
            ..LookupPipeline::default()
        };
        let mut asked = 0;
        for running in 0..requests {
            let lookup = pipeline.before_running(shard, running as usize, |at| {
                assert_eq!(at, asked, "positions are asked about in order, once each");
                asked += 1;
                ahead(at as u64)
            });
            let Some(key) = key_of(running) else {
                assert!(lookup.is_none(), "request {running} is not a lookup");
                continue;
            };
            let lookup = lookup.expect("a local point request gets its lookup");
            assert_eq!(lookup.key, key);
            let walked = lookup.cursor.is_none_or(|cursor| cursor.is_done());
            assert!(
                walked,
                "request {running} runs before its lookup was fetched"
            );
        }
    }

    #[test]
    fn each_lookup_is_fetched_to_its_end_before_its_request_runs() {
        let shard = kv_shard();
        run(&shard, 1_000, |at| Some(at * 97 % KEYS));
        // Keys that are not there end their walk at the leaf.
        run(&shard, 100, |at| Some(KEYS + at));
    }

    #[test]
    fn requests_for_other_cores_get_no_lookup_and_lookups_still_walk_to_their_end() {
        // Half the requests hop (two shards), in runs of up to five; the walks advance on
        // local point requests only, and still reach their ends.
        let shard = kv_shard();
        run(&shard, 1_000, |at| {
            (at * 7 % 10 < 5).then_some(at * 97 % KEYS)
        });
        run(&shard, 40, |_| None);
    }

    /// One request of the mixed workload below, as owned bytes.
    enum Op {
        Get(Vec<u8>),
        Replace(Vec<u8>),
        Insert(Vec<u8>),
        Delete(Vec<u8>),
    }

    impl Op {
        fn request(&self) -> Request<'_> {
            match self {
                Op::Get(key) => Request::Select(Select {
                    space_id: KV,
                    index_id: 0,
                    limit: 1,
                    offset: 0,
                    iterator: 0,
                    key,
                    fetch_position: false,
                    after_position: None,
                    after_tuple: None,
                }),
                Op::Replace(tuple) => Request::Replace(Insert {
                    space_id: KV,
                    tuple,
                }),
                Op::Insert(tuple) => Request::Insert(Insert {
                    space_id: KV,
                    tuple,
                }),
                Op::Delete(key) => Request::Delete(Delete {
                    space_id: KV,
                    index_id: 0,
                    key,
                }),
            }
        }
    }

    fn one_uint_array(id: u64) -> Vec<u8> {
        let mut bytes = vec![0x91];
        msgpack::write_uint(&mut bytes, id);
        bytes
    }

    /// Runs `ops` on both shards, `fetched` fetching lookups ahead and handing each request
    /// its own (as the server does), `plain` not, and checks every reply is the same.
    fn run_on_both(fetched: &mut Shard, plain: &mut Shard, ops: &[Op]) {
        let mut pipeline = LookupPipeline {
            enabled: true,
            ..LookupPipeline::default()
        };
        let target = |shard: &Shard, at: usize| match ops.get(at) {
            None => Ahead::End,
            Some(op) => PointTarget::of(&op.request().target(), &shard.engine)
                .map_or(Ahead::Other, Ahead::Lookup),
        };
        let (mut fetched_out, mut plain_out) = (Vec::new(), Vec::new());
        for (at, op) in ops.iter().enumerate() {
            let lookup = pipeline.before_running(fetched, at, |ahead| target(fetched, ahead));
            let _executed = fetched.execute(at as u64, 1, &op.request(), lookup, &mut fetched_out);
            let _executed = plain.execute(at as u64, 1, &op.request(), None, &mut plain_out);
            assert_eq!(fetched_out, plain_out);
            fetched_out.clear();
            plain_out.clear();
        }
    }

    #[test]
    fn replies_are_the_same_with_lookups_fetched_ahead_while_writes_free_nodes() {
        // Two shards with the same data run the same runs of mixed requests. Deletes walk
        // through the keys in order, emptying leaves so that they merge and are freed while
        // cursors point at them: those cursors must restart from the root, never read a
        // freed node (which would show as a crash or a different reply).
        let (mut fetched, mut plain) = (kv_shard(), kv_shard());
        let mut rng = StdRng::seed_from_u64(0x5eed);
        let mut next_deleted = 0u64;
        for _run in 0..400 {
            let ops: Vec<Op> = (0..64)
                .map(|_| match rng.gen_range(0..8) {
                    0..=2 => Op::Get(one_uint_array(rng.gen_range(0..KEYS + 1_000))),
                    3 => Op::Replace(one_uint_array(rng.gen_range(0..KEYS))),
                    4 => Op::Insert(one_uint_array(rng.gen_range(0..KEYS + 1_000))),
                    _ => {
                        next_deleted = (next_deleted + 1) % KEYS;
                        Op::Delete(one_uint_array(next_deleted))
                    }
                })
                .collect();
            run_on_both(&mut fetched, &mut plain, &ops);
        }
        let left = |shard: &Shard| shard.engine.space(KV).expect("kv").len();
        assert_eq!(left(&fetched), left(&plain));
        assert!(left(&fetched) < KEYS as usize, "the deletes emptied leaves");
    }

    #[test]
    fn a_get_reads_its_fetched_entry_only_where_it_still_is() {
        // Gets, deletes and inserts over two leaves' worth of keys: between a get's walk
        // and its run, keys before it in its leaf come and go, so the entry the walk found
        // moves within the leaf (or the leaf splits). The get must answer what a fresh
        // lookup answers.
        let (mut fetched, mut plain) = (kv_shard(), kv_shard());
        let mut rng = StdRng::seed_from_u64(0x1eaf);
        let hot = 50_000..50_064u64;
        for _run in 0..400 {
            let ops: Vec<Op> = (0..64)
                .map(|_| {
                    let key = one_uint_array(rng.gen_range(hot.clone()));
                    match rng.gen_range(0..4) {
                        0 | 1 => Op::Get(key),
                        2 => Op::Delete(key),
                        _ => Op::Insert(key),
                    }
                })
                .collect();
            run_on_both(&mut fetched, &mut plain, &ops);
        }
    }
}
