//! The tarantool/crud API answered natively over IPROTO CALL (`crud.insert` …
//! `crud.select`, the `*_many` family; spec §18, issue 6): an application layer on top of
//! `shard`, below `server`.
//!
//! Transport-independent: everything here works on shards, storage types and msgpack
//! bytes; nothing knows connections or messages (the router is the server's `session`, the
//! bytes that cross cores are `server::mesh`'s). Which core owns a point op's key is
//! placement's answer ([`write::PointOp::route`]).
//!
//! A call runs in three steps:
//!
//! 1. [`plan`] (`plan.rs`), on the accepting core, from the schema alone: the CALL's
//!    arguments to a [`Plan`]. Arguments are decoded and checked, objects flattened,
//!    bucket_id filled in, conditions planned. No data is read.
//! 2. [`run`] (`run.rs`), the one shard-side entry, on the shards that hold the data: a
//!    whole call ([`Work::Call`]: a [`Plan::Point`] on its owner, or any plan when one
//!    shard holds everything), a `*_many` call's ops for one shard ([`Work::Ops`]), or one
//!    shard's part of a call every shard runs ([`Work::Part`]: select, min/max, count, len,
//!    truncate). Every change is logged; the commit comes back in [`Ran`].
//! 3. Finish (`finish.rs`), on the accepting core: [`finish_point`], [`finish_many`],
//!    [`finish_parts`] (which merges the shards' runs by entry key) return the CALL's
//!    values; [`encode_reply`] wraps them.
//!
//! `box.space`'s data methods over CALL (`box.space.kv:count(key)` …) take the same seam:
//! [`box_space`] plans them as a select or a write the server answers ([`Plan::BoxSelect`],
//! [`Plan::BoxWrite`]) or as parts every shard counts ([`Plan::Len`], [`Plan::Sum`]).
//!
//! The rest: [`args`] (function names, positional arguments and options, checked as crud's
//! `checks` does: violations are *raised*, IPROTO error 32); [`flatten`] (objects to tuples,
//! and the `bucket_id` field; [`bucket`]: the formula); [`write`] (point ops and `*_many`
//! batches on a space); [`select`] (conditions, the scan plan, the per-shard scan and the
//! merge); [`result`] (`{metadata, rows}` and `fields`); [`error`] (crud's error objects).
//!
//! Cost sketch: the common point calls (connector-shaped arguments, no options) are
//! decoded in one pass (`protocol::crud_call`) and planned in one pass ([`fast_plan`]), each
//! falling back to the general path on anything else. A point op borrows its arguments
//! from the CALL packet and writes its reply from the stored tuple, its metadata copied
//! from a per-space encoding ([`result::MetadataCache`], found by `Space::instance`); beyond
//! the reply it allocates what storage does (the new tuple): a tuple whose nil `bucket_id`
//! it fills in stays the request's bytes with that field swapped ([`write::Spliced`]),
//! which storage copies once, straight into the stored tuple (`Space::insert_pieces`);
//! other rebuilt tuples use a per-thread buffer ([`write::Scratch`]) (`crud.get` and
//! `crud.delete` allocate nothing; tests/crud_allocations.rs holds the counts). A select
//! holds at most `first` rows per shard before the merge.

pub mod args;
pub mod box_schema;
pub mod box_space;
pub mod bucket;
pub mod error;
pub mod fast_plan;
mod finish;
pub mod flatten;
pub mod mp;
mod plan;
pub mod result;
mod run;
pub mod select;
pub mod sites;
pub mod write;

#[cfg(test)]
mod tests;

pub use args::{Func, Raised};
use error::CrudError;
pub use finish::{
    encode_reply, encode_values_reply, finish_border, finish_count, finish_len, finish_many,
    finish_parts, finish_point, finish_select, finish_truncate, refuse_writes, write_point_values,
};
pub use plan::{plan, plan_general};
use result::Columns;
pub use run::{plan_and_run, run, Answer, Part, Ran, ShardOps, Work};
use select::{Planned, SelectPlan};
use write::{OpBytes, PointOp};

/// What crud needs to know of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrudConfig {
    /// vshard's bucket count for the bucket_id formula (config `bucket_count`).
    pub bucket_count: u32,
    /// The uuid crud would name the replicaset (and instance) by: `storage_info` keys,
    /// `*_many` error texts.
    pub instance_uuid: String,
    /// Point replies' metadata, encoded once per space.
    pub metadata: result::MetadataCache,
}

impl CrudConfig {
    /// From the server's config and identity (what the connection holds in `Shared`).
    pub fn new(config: &crate::config::Config, instance_uuid: &uuid::Uuid) -> CrudConfig {
        CrudConfig::for_instance(config.bucket_count, instance_uuid.to_string())
    }

    pub fn for_instance(bucket_count: u32, instance_uuid: impl Into<String>) -> CrudConfig {
        CrudConfig {
            bucket_count,
            instance_uuid: instance_uuid.into(),
            metadata: result::MetadataCache::default(),
        }
    }
}

/// What a crud CALL answers: the CALL's return values (a msgpack array, sent as
/// `{0x30: values}`), or an error raised out of the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrudReply {
    Values(Vec<u8>),
    Raised(Raised),
}

/// Whether a CALL's function name belongs to crud (the connection hands those here).
pub fn is_crud_function(function_name: &str) -> bool {
    function_name.starts_with("crud.")
}

/// A planned call: what must run where (see the module docs for the seam). Its ops borrow
/// what they can from the CALL's arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan<'a> {
    /// The answer is known from the arguments and schema alone.
    Reply(Vec<u8>),
    Point(PointPlan<'a>),
    Many(ManyPlan<'a>),
    Select(Planned),
    Count(SelectPlan),
    Border {
        plan: SelectPlan,
        columns: Columns,
    },
    Len {
        space_id: u32,
    },
    Truncate {
        space_id: u32,
        /// `box.space.X:truncate()` returns nothing; `crud.truncate`, `true`.
        returns_nothing: bool,
    },
    /// A `box.space` read that is a select (see [`box_space`]): the server answers it as
    /// the IPROTO SELECT it is.
    BoxSelect(box_space::BoxSelect),
    /// A `box.space` write (see [`box_space`]): the server answers it as the IPROTO
    /// request it is.
    BoxWrite(box_space::BoxWrite),
    /// A `box.space` read answered with the sum of every shard's count.
    Sum(box_space::ShardSum),
}

impl<'a> Plan<'a> {
    /// Splits off the plan of a call every core answers a part of without writing (select,
    /// count, min/max, len), as a value that borrows nothing of the CALL: it can wait
    /// beside the session for the parts while the connection reads on.
    pub fn into_fan_out(self) -> FanOutPlan<'a> {
        match self {
            Plan::Select(planned) => FanOutPlan::Read(Plan::Select(planned)),
            Plan::Count(plan) => FanOutPlan::Read(Plan::Count(plan)),
            Plan::Border { plan, columns } => FanOutPlan::Read(Plan::Border { plan, columns }),
            Plan::Len { space_id } => FanOutPlan::Read(Plan::Len { space_id }),
            Plan::Sum(sum) => FanOutPlan::Read(Plan::Sum(sum)),
            other @ (Plan::Reply(_)
            | Plan::Point(_)
            | Plan::Many(_)
            | Plan::Truncate { .. }
            | Plan::BoxSelect(_)
            | Plan::BoxWrite(_)) => FanOutPlan::Other(other),
        }
    }
}

/// A plan split by [`Plan::into_fan_out`].
pub enum FanOutPlan<'a> {
    /// A call every core answers a part of without writing, owning all it needs.
    Read(Plan<'static>),
    /// Any other plan, as it was: one that writes (truncate), or no fan-out at all.
    Other(Plan<'a>),
}

/// One op on the owner shard of its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointPlan<'a> {
    pub func: Func,
    pub space_id: u32,
    pub op: PointOp<'a>,
    pub columns: Columns,
    pub noreturn: bool,
}

/// A `*_many` call: its ops in order, and the errors found while planning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManyPlan<'a> {
    pub func: Func,
    pub space_id: u32,
    pub ops: Vec<PointOp<'a>>,
    /// The tuple each op came from (flattened, bucket_id set), for `operation_data`.
    pub tuples: Vec<OpBytes<'a>>,
    /// Objects that could not be flattened (they have no op); reported first.
    pub early_errors: Vec<CrudError>,
    pub stop_on_error: bool,
    pub rollback_on_error: bool,
    pub noreturn: bool,
    pub columns: Columns,
}
