//! The tarantool/crud API answered natively over IPROTO CALL (`crud.insert` …
//! `crud.select`, the `*_many` family; spec §18, issue 6).
//!
//! Transport- and routing-independent: everything here works on storage types and
//! msgpack bytes; nothing knows connections, cores or messages.
//!
//! * [`args`]: function names, positional arguments and options, checked as crud's
//!   `checks` does (violations are *raised*, IPROTO error 32).
//! * [`flatten`]: objects to tuples, and the `bucket_id` field ([`bucket`]: the formula).
//! * [`write`]: point ops and `*_many` batches as they run on the owner shard.
//! * [`select`]: conditions, the scan plan, the per-shard scan and the merge.
//! * [`result`]: `{metadata, rows}` and `fields`; [`error`]: crud's error objects.
//! * [`on_shard`]: step 2 on a real shard, every change logged to its WAL; and the whole
//!   call on one shard. [`wire`]: the bytes shard-side work travels as between cores.
//!
//! The router is `server::dispatch` (`Session::call`): a point op runs on its owner core
//! (forwarded there as its CALL packet, which the owner plans again); a `*_many` call sends
//! each owner its ops in one message; the rest fan out to every core and merge here.
//!
//! # The three steps, and the seam the router fills
//!
//! A call runs in three steps; [`execute_on_engine`] runs all three on one engine:
//!
//! 1. **Plan** on the accepting core, from the schema alone (every shard holds every
//!    space definition): [`plan`] → [`Plan`]. Arguments are decoded and checked, objects
//!    flattened, bucket_id filled in, conditions planned. No data is read.
//! 2. **Run** on the shards that hold the data — this is the seam:
//!    * [`Plan::Point`]: on the owner shard only, `write::apply(space, &plan.op)`. The
//!      owner is `shard_of_key(key)` with `key` from `plan.op.placement_key(space, &mut
//!      key)` (when that fails, run it locally: it reports the same error).
//!    * [`Plan::Many`]: group `plan.ops` by owner shard (keeping their positions), send
//!      each shard its ops in order, in one message, and run `write::apply_batch(engine,
//!      plan.space_id, &ops, plan.stop_on_error, plan.rollback_on_error)` there; put the
//!      returned items back at their positions.
//!    * [`Plan::Select`] / [`Plan::Border`]: on every shard, `select::scan_shard(engine,
//!      &plan)` (each returns at most `first` rows).
//!    * [`Plan::Count`]: on every shard `select::count_shard`, summed. [`Plan::Len`]:
//!      `Space::len` summed. [`Plan::Truncate`]: `Space::truncate` on every shard.
//! 3. **Finish** on the accepting core: [`finish_point`], [`finish_many`],
//!    [`finish_select`] (which merges the shards' runs by entry key), [`finish_border`],
//!    [`finish_count`], [`finish_len`], [`finish_truncate`] return the CALL's values; the
//!    connection wraps them with [`encode_reply`].
//!
//! Cost sketch: the common point calls (connector-shaped arguments, no options) are
//! decoded in one pass ([`fast_call`]) and planned in one pass ([`fast_plan`]), each
//! falling back to the general path on anything else. A point op borrows its arguments
//! from the CALL packet and writes its reply
//! from the stored tuple, its metadata copied from a per-space encoding
//! ([`result::MetadataCache`], found by `Space::instance`); beyond the reply it allocates what storage does (the new
//! tuple): a tuple whose nil `bucket_id` it fills in stays the request's bytes with that
//! field swapped ([`write::Spliced`]), which storage copies once, straight into the stored
//! tuple (`Space::insert_pieces`); other rebuilt tuples use a per-thread buffer
//! ([`write::Scratch`]) (`crud.get` and `crud.delete` allocate nothing;
//! tests/crud_allocations.rs holds the counts). `execute_on_shard` runs such a point plan
//! without wrapping it in a [`Plan`]. A select
//! holds at most `first` rows per shard before the merge.

pub mod args;
pub mod bucket;
pub mod error;
pub mod fast_call;
pub mod fast_plan;
pub mod flatten;
pub mod mp;
pub mod on_shard;
pub mod result;
pub mod select;
pub mod sites;
pub mod write;

#[cfg(test)]
mod tests;

use crate::msgpack::{write_array_len, write_str, write_uint};
use crate::protocol::reply;
use crate::protocol::reply::ErrorEntry as ReplyErrorEntry;
use crate::protocol::ErrorCode;
use crate::storage::{Engine, Space};
pub use args::{Func, Raised};
use error::{by_func, CrudError};
use result::Columns;
use select::{Planned, SelectPlan, ShardRows};
use write::{BatchItem, OpBytes, PointOp};

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

/// Writes the whole IPROTO reply packet for `reply`.
pub fn encode_reply(out: &mut Vec<u8>, sync: u64, schema_version: u64, crud_reply: &CrudReply) {
    match crud_reply {
        CrudReply::Values(values) => encode_values_reply(out, sync, schema_version, |out| {
            out.extend_from_slice(values)
        }),
        CrudReply::Raised(raised) => {
            let entry = ReplyErrorEntry::new(raised.code, &raised.message);
            reply::encode_error_stack(out, sync, schema_version, &[entry]);
        }
    }
}

/// Writes a success reply packet whose values (`{0x30: values}`) `write_values` appends in
/// place, with no intermediate buffer.
pub fn encode_values_reply(
    out: &mut Vec<u8>,
    sync: u64,
    schema_version: u64,
    write_values: impl FnOnce(&mut Vec<u8>),
) {
    let mark = reply::begin_packet(out);
    reply::write_reply_header(
        out,
        crate::protocol::codes::request_type::OK,
        sync,
        schema_version,
    );
    out.push(0x81);
    out.push(crate::protocol::codes::body_key::DATA as u8);
    write_values(out);
    reply::finish_packet(out, mark);
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
    },
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

/// `[a, b]` from two encoded values.
fn two(first: &[u8], second: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(first.len() + second.len() + 1);
    write_array_len(&mut out, 2);
    out.extend_from_slice(first);
    out.extend_from_slice(second);
    out
}

/// `[nil, err]`.
fn returned_error(error: &CrudError) -> Vec<u8> {
    let mut encoded = Vec::new();
    error.write(&mut encoded);
    two(mp::NIL, &encoded)
}

/// `[nil, [err, ...]]` or `[result, [err, ...]]`.
fn many_errors(result: Option<&[u8]>, errors: &[CrudError]) -> Vec<u8> {
    let mut list = Vec::new();
    write_array_len(&mut list, errors.len() as u32);
    for error in errors {
        error.write(&mut list);
    }
    two(result.unwrap_or(mp::NIL), &list)
}

/// The space a call names, or its name when there is none.
fn space_named<'e, 'n>(engine: &'e Engine, name: &'n [u8]) -> Result<&'e Space, &'n str> {
    match mp::str_bytes(name).and_then(|name| engine.space_named(name)) {
        Some(space) => Ok(space),
        None => Err(mp::as_str(name).unwrap_or_default()),
    }
}

/// Step 1: decodes and checks the call, and plans it against the schema. The common
/// point calls take [`fast_plan`]'s one pass; everything else, [`plan_general`].
pub fn plan<'a>(
    engine: &Engine,
    config: &CrudConfig,
    function_name: &str,
    args: &'a [u8],
) -> Result<Plan<'a>, Raised> {
    let func = func_or_raised(function_name)?;
    if let Some(point) = fast_plan::plan_point(engine, config, func, args) {
        return Ok(Plan::Point(point));
    }
    plan_func(engine, config, func, args)
}

/// [`plan`] without the one-pass path: the reference it is checked against.
pub fn plan_general<'a>(
    engine: &Engine,
    config: &CrudConfig,
    function_name: &str,
    args: &'a [u8],
) -> Result<Plan<'a>, Raised> {
    plan_func(engine, config, func_or_raised(function_name)?, args)
}

pub(super) fn func_or_raised(function_name: &str) -> Result<Func, Raised> {
    Func::from_name(function_name).ok_or_else(|| Raised {
        code: ErrorCode::ER_NO_SUCH_PROC,
        message: format!("Procedure '{function_name}' is not defined"),
    })
}

/// What crud makes of arguments `checks` refused: a Lua error raised at the position of the
/// `checks` call; crud.select runs its checks inside `SelectError:pcall`, so it returns
/// them (positions and all) as a SelectError.
fn refused_arguments(func: Func, error: args::ArgError) -> Result<Plan<'static>, Raised> {
    match error {
        args::ArgError::Checks(message) if func == Func::Select => {
            let text = format!(
                "{}{}{message}",
                sites::position(sites::SELECT_RERAISE),
                sites::position(func.checks_site())
            );
            Ok(Plan::Reply(returned_error(&by_func::select_raised(&text))))
        }
        args::ArgError::Checks(message) => Err(Raised::lua(format!(
            "{}{message}",
            sites::position(func.checks_site())
        ))),
        args::ArgError::SelectOpts(lua_type) => Err(Raised::lua(format!(
            "{}attempt to index local 'opts' (a {lua_type} value)",
            sites::position(sites::site(sites::SELECT, 459))
        ))),
    }
}

pub(super) fn plan_func<'a>(
    engine: &Engine,
    config: &CrudConfig,
    func: Func,
    args: &'a [u8],
) -> Result<Plan<'a>, Raised> {
    // The decoder may have left them unmeasured (`fast_call`); its error comes first.
    if fast_call::is_torn(args) {
        let error = fast_call::torn_args_error();
        return Err(Raised {
            code: error.code(),
            message: error.to_string(),
        });
    }
    if func == Func::Stats {
        // Statistics are disabled: crud answers an empty table.
        return Ok(Plan::Reply(vec![0x91, 0x90]));
    }
    let parsed = match args::parse(func, args) {
        Ok(parsed) => parsed,
        Err(error) => return refused_arguments(func, error),
    };
    if func == Func::Pairs {
        // crud.pairs returns a Lua iterator, which IPROTO cannot encode.
        return Err(Raised::lua("unsupported Lua type 'cdata'"));
    }
    if func == Func::StorageInfo {
        let mut info = Vec::new();
        write_array_len(&mut info, 1);
        mp::write_map_len(&mut info, 1);
        write_str(&mut info, config.instance_uuid.as_bytes());
        mp::write_map_len(&mut info, 2);
        write_str(&mut info, b"status");
        write_str(&mut info, b"running");
        write_str(&mut info, b"is_master");
        info.push(0xc3);
        return Ok(Plan::Reply(info));
    }
    match plan_data(engine, config, func, &parsed) {
        Ok(plan) => Ok(plan),
        Err(Refusal::Returned(values)) => Ok(Plan::Reply(values)),
        Err(Refusal::Raised(raised)) => Err(raised),
    }
}

/// How a call that cannot be planned is answered.
enum Refusal {
    /// Returned values (`[nil, err]` and the like).
    Returned(Vec<u8>),
    /// A Lua error raised out of crud.
    Raised(Raised),
}

impl From<Vec<u8>> for Refusal {
    fn from(values: Vec<u8>) -> Refusal {
        Refusal::Returned(values)
    }
}

fn returned(error: CrudError) -> Refusal {
    Refusal::Returned(returned_error(&error))
}

/// A point op's bucket_id error, as the function reports it.
fn bucket_refusal(func: Func, error: flatten::BucketError) -> Refusal {
    match error {
        flatten::BucketError::Invalid(message) => {
            returned(by_func::bucket_id_failed(func, &message))
        }
        flatten::BucketError::NoRoute(bucket_id) => returned(by_func::no_route(func, &bucket_id)),
    }
}

/// `opts.bucket_id` of get, update and delete: validated, and routed.
fn check_key_bucket_id(func: Func, opts: &args::Opts, bucket_count: u32) -> Result<(), Refusal> {
    let Some(given) = opts.bucket_id else {
        return Ok(());
    };
    if let Err(message) = flatten::validate_bucket_id(given, "opts") {
        return Err(returned(by_func::bucket_id_failed(func, &message)));
    }
    if !flatten::bucket_id_routes(given, bucket_count) {
        let mut text = Vec::new();
        bucket::lua_tostring(given, &mut text);
        return Err(returned(by_func::no_route(
            func,
            &String::from_utf8_lossy(&text),
        )));
    }
    Ok(())
}

/// Plans a call on a space; `Err` is the finished answer (returned values or a raise).
fn plan_data<'a>(
    engine: &Engine,
    config: &CrudConfig,
    func: Func,
    parsed: &args::Args<'a>,
) -> Result<Plan<'a>, Refusal> {
    use Func::*;
    let opts = &parsed.opts;
    if func.is_many() && mp::array_items(parsed.get(1)).is_some_and(|items| items.is_empty()) {
        return Err(many_errors(None, &[by_func::empty_batch(func)]).into());
    }
    match func {
        Select | Count => return plan_scan(engine, config, func, parsed),
        InsertMany | InsertObjectMany | ReplaceMany | ReplaceObjectMany | UpsertMany
        | UpsertObjectMany => return plan_many(engine, config, func, parsed),
        _ => {}
    }
    let space = match space_named(engine, parsed.get(0)) {
        Ok(space) => space,
        Err(name) if func == Truncate => {
            return Err(returned(by_func::truncate_no_such_space(
                &config.instance_uuid,
                name,
            )))
        }
        Err(name) if func.is_object() => {
            return Err(returned(by_func::flatten_failed(
                func,
                &format!(
                    "Failed to get space format: GetSpaceFormatError: {}",
                    error::no_such_space(name)
                ),
            )))
        }
        Err(name) => return Err(returned(by_func::no_such_space(func, name))),
    };
    let exact_columns = || result::resolve_fields(&space.format, opts.fields).map_err(returned);
    let with_bucket = |tuple: &'a [u8]| {
        flatten::set_bucket_id(space, tuple, opts.bucket_id, config.bucket_count)
            .map_err(|error| bucket_refusal(func, error))
    };
    let flat_with_bucket = |object: &[u8]| {
        let flat = flatten::flatten(space, object, opts.skip_nullability_check_on_flatten)
            .map_err(|message| {
                returned(by_func::flatten_failed(
                    func,
                    &flatten::flatten_error_text(&message),
                ))
            })?;
        owned_with_bucket(space, flat, opts.bucket_id, config.bucket_count)
            .map_err(|error| bucket_refusal(func, error))
    };
    let point = |op: PointOp<'a>| -> Result<Plan<'a>, Refusal> {
        Ok(Plan::Point(PointPlan {
            func,
            space_id: space.id,
            op,
            columns: exact_columns()?,
            noreturn: opts.noreturn,
        }))
    };
    if matches!(func, Get | Update | Delete) {
        if mp::is_nil(parsed.get(1)) && opts.bucket_id.is_none() {
            // The bucket of a nil key: vshard refuses to hash it.
            return Err(Refusal::Raised(Raised::lua(format!(
                "{}Usage: vshard.router.bucket_id_strcrc32(key)",
                sites::position(sites::site(sites::VSHARD_ROUTER, 1637))
            ))));
        }
        check_key_bucket_id(func, opts, config.bucket_count)?;
        if let Some(mode) = opts.mode.filter(|mode| !matches!(*mode, "read" | "write")) {
            if func == Get {
                return Err(returned(by_func::unknown_call_mode(func, mode)));
            }
        }
    }
    match func {
        Insert => point(PointOp::Insert {
            tuple: with_bucket(parsed.get(1))?,
        }),
        InsertObject => point(PointOp::Insert {
            tuple: flat_with_bucket(parsed.get(1))?,
        }),
        Replace => point(PointOp::Replace {
            tuple: with_bucket(parsed.get(1))?,
        }),
        ReplaceObject => point(PointOp::Replace {
            tuple: flat_with_bucket(parsed.get(1))?,
        }),
        Upsert => point(PointOp::Upsert {
            tuple: with_bucket(parsed.get(1))?,
            ops: parsed.get(2).into(),
        }),
        UpsertObject => point(PointOp::Upsert {
            tuple: flat_with_bucket(parsed.get(1))?,
            ops: parsed.get(2).into(),
        }),
        Update => point(PointOp::Update {
            key: select::key_array(parsed.get(1)),
            ops: parsed.get(2).into(),
        }),
        Delete => point(PointOp::Delete {
            key: select::key_array(parsed.get(1)),
        }),
        Get => point(PointOp::Get {
            key: select::key_array(parsed.get(1)),
        }),
        Min | Max => {
            let plan = select::plan_border(space, parsed.get(1), func == Max)
                .map_err(|text| returned(by_func::border_failed(func, text)))?;
            let index = space.index(plan.index_id).ok();
            if let Some(index) =
                index.filter(|index| index.def.kind != crate::storage::IndexKind::Tree)
            {
                // The storage's `index:min()` of a HASH index.
                let border = if func == Max { "max" } else { "min" };
                let message = format!(
                    "Index '{}' (HASH) of space '{}' (memtx) does not support {border}()",
                    index.def.name, space.name
                );
                return Err(returned(by_func::storage_failed(func, &message)));
            }
            let columns = result::resolve_fields(&space.format, opts.fields).map_err(|_| {
                // crud 1.7.5 indexes the nil result of its own failed field filter.
                Refusal::Raised(Raised::lua(format!(
                    "{}attempt to index local 'result' (a nil value)",
                    sites::position(sites::site(sites::BORDERS, 172))
                )))
            })?;
            Ok(Plan::Border { plan, columns })
        }
        Len => Ok(Plan::Len { space_id: space.id }),
        Truncate => Ok(Plan::Truncate { space_id: space.id }),
        Select | Count | Pairs | StorageInfo | Stats | InsertMany | InsertObjectMany
        | ReplaceMany | ReplaceObjectMany | UpsertMany | UpsertObjectMany => {
            unreachable!("planned elsewhere")
        }
    }
}

/// crud.select and crud.count, their checks in crud's order: select's negative `first`,
/// then `batch_size` and `yield_every`, the conditions, the space, the plan.
fn plan_scan<'a>(
    engine: &Engine,
    config: &CrudConfig,
    func: Func,
    parsed: &args::Args<'a>,
) -> Result<Plan<'a>, Refusal> {
    let opts = &parsed.opts;
    let is_select = func == Func::Select;
    if is_select && opts.first.is_some_and(|first| first < 0) && opts.after.is_none() {
        return Err(returned(by_func::negative_first()));
    }
    if is_select && opts.batch_size.is_some_and(|size| size < 1.0) {
        return Err(returned(by_func::below_one(func, "batch_size")));
    }
    if opts.yield_every.is_some_and(|every| every < 1.0) {
        return Err(returned(by_func::below_one(func, "yield_every")));
    }
    let (fields, first, after) = match is_select {
        true => (opts.fields, opts.first, opts.after),
        false => (None, None, None),
    };
    let space = space_named(engine, parsed.get(0));
    let planned =
        select::plan_select(func, space, parsed.get(1), fields, first, after).map_err(|error| {
            match error {
                select::PlanError::Error(error) => returned(error),
                select::PlanError::Storage(message) if is_select => {
                    returned(by_func::select_raised(&message))
                }
                select::PlanError::Storage(message) => returned(by_func::count_storage_failed(
                    &config.instance_uuid,
                    &message,
                )),
            }
        })?;
    Ok(match func {
        Func::Select => Plan::Select(planned),
        _ => Plan::Count(planned.plan),
    })
}

/// [`flatten::set_bucket_id`] of a tuple built here (a flattened object): kept as it is
/// when no field needs filling.
fn owned_with_bucket(
    space: &Space,
    tuple: Vec<u8>,
    opts_bucket_id: Option<&[u8]>,
    bucket_count: u32,
) -> Result<OpBytes<'static>, flatten::BucketError> {
    let filled = match flatten::set_bucket_id(space, &tuple, opts_bucket_id, bucket_count)? {
        OpBytes::Borrowed(_) => None,
        filled => Some(filled.into_owned()),
    };
    Ok(filled.unwrap_or_else(|| tuple.into()))
}

fn plan_many<'a>(
    engine: &Engine,
    config: &CrudConfig,
    func: Func,
    parsed: &args::Args<'a>,
) -> Result<Plan<'a>, Refusal> {
    let opts = &parsed.opts;
    let items = mp::array_items(parsed.get(1)).unwrap_or_default();
    let is_upsert = matches!(func, Func::UpsertMany | Func::UpsertObjectMany);
    let split = |item: &'a [u8]| -> (&'a [u8], &'a [u8]) {
        if !is_upsert {
            return (item, &[][..]);
        }
        let pair = mp::array_items(item).unwrap_or_default();
        (
            pair.first().copied().unwrap_or(mp::NIL),
            pair.get(1).copied().unwrap_or(&[0x90][..]),
        )
    };
    let space = match space_named(engine, parsed.get(0)) {
        Ok(space) => space,
        Err(name) if func.is_object() => {
            // Every object fails to flatten, each reported with its object.
            let text = format!(
                "Failed to get space format: GetSpaceFormatError: {}",
                error::no_such_space(name)
            );
            let mut errors = Vec::new();
            for item in items {
                errors
                    .push(by_func::flatten_failed(func, &text).with_operation_data(split(item).0));
                if opts.stop_on_error {
                    break;
                }
            }
            return Err(many_errors(None, &errors).into());
        }
        Err(name) => return Err(many_errors(None, &[by_func::no_such_space(func, name)]).into()),
    };
    let mut plan = ManyPlan {
        func,
        space_id: space.id,
        ops: Vec::with_capacity(items.len()),
        tuples: Vec::with_capacity(items.len()),
        early_errors: Vec::new(),
        stop_on_error: opts.stop_on_error,
        rollback_on_error: opts.rollback_on_error,
        noreturn: opts.noreturn,
        columns: Columns::All,
    };
    for item in items {
        let (data, ops) = split(item);
        if !func.is_object() && mp::lua_type(data) != "table" {
            // crud indexes each tuple to find its bucket_id.
            return Err(Refusal::Raised(Raised::lua(format!(
                "{}attempt to index local 'tuple' (a {} value)",
                sites::position(sites::site(sites::SHARDING, 138)),
                mp::lua_type(data)
            ))));
        }
        let tuple = if func.is_object() {
            match flatten::flatten(space, data, opts.skip_nullability_check_on_flatten) {
                Ok(tuple) => owned_with_bucket(space, tuple, None, config.bucket_count),
                Err(message) => {
                    let error =
                        by_func::flatten_failed(func, &flatten::flatten_error_text(&message))
                            .with_operation_data(data);
                    if opts.stop_on_error {
                        return Err(many_errors(None, &[error]).into());
                    }
                    plan.early_errors.push(error);
                    continue;
                }
            }
        } else {
            flatten::set_bucket_id(space, data, None, config.bucket_count)
        };
        let tuple = match tuple {
            Ok(tuple) => tuple,
            // The batch is split by bucket before anything runs: one bad bucket_id fails
            // the whole call.
            Err(flatten::BucketError::Invalid(message)) => {
                return Err(
                    many_errors(None, &[by_func::split_tuples_failed(func, &message)]).into(),
                );
            }
            Err(flatten::BucketError::NoRoute(bucket_id)) => {
                return Err(many_errors(
                    None,
                    &[by_func::split_tuples_failed(
                        func,
                        &format!("Bucket {bucket_id} cannot be found. Is rebalancing in progress?"),
                    )],
                )
                .into());
            }
        };
        plan.ops.push(match func {
            Func::InsertMany | Func::InsertObjectMany => PointOp::Insert {
                tuple: tuple.clone(),
            },
            Func::ReplaceMany | Func::ReplaceObjectMany => PointOp::Replace {
                tuple: tuple.clone(),
            },
            _ => PointOp::Upsert {
                tuple: tuple.clone(),
                ops: ops.into(),
            },
        });
        plan.tuples.push(tuple);
    }
    // The fields are checked once the tuples are split by bucket (in the router method).
    plan.columns = result::resolve_fields(&space.format, opts.fields)
        .map_err(|error| Refusal::from(many_errors(None, &[error])))?;
    if plan.ops.is_empty() {
        return Err(many_errors(None, &plan.early_errors).into());
    }
    Ok(Plan::Many(plan))
}

/// Step 3 of a point op: `[{metadata, rows}, nil]`, `[nil, nil]` with noreturn, or
/// `[nil, err]`. The error is a box error (a `StorageError`, or its text when the op ran on
/// another core).
pub fn finish_point<R: AsRef<[u8]>, E: std::fmt::Display>(
    config: &CrudConfig,
    space: &Space,
    plan: &PointPlan<'_>,
    outcome: Result<Option<R>, E>,
) -> Vec<u8> {
    let mut values = Vec::new();
    write_point_values(&mut values, config, space, plan, outcome);
    values
}

/// [`finish_point`], appending the values to `out`.
pub fn write_point_values<R: AsRef<[u8]>, E: std::fmt::Display>(
    out: &mut Vec<u8>,
    config: &CrudConfig,
    space: &Space,
    plan: &PointPlan<'_>,
    outcome: Result<Option<R>, E>,
) {
    let row = match outcome {
        Ok(row) => row,
        Err(error) => {
            let error = by_func::storage_failed(plan.func, &error.to_string());
            return out.extend_from_slice(&returned_error(&error));
        }
    };
    write_array_len(out, 2);
    if plan.noreturn {
        out.extend_from_slice(mp::NIL);
    } else {
        let row = row.as_ref().map(AsRef::as_ref);
        let rows: &[&[u8]] = match &row {
            Some(row) => std::slice::from_ref(row),
            None => &[],
        };
        match &plan.columns {
            Columns::All => config.metadata.write_result_all(out, space, rows),
            columns => result::write_result(out, &space.format, columns, Some(rows)),
        }
    }
    out.extend_from_slice(mp::NIL);
}

/// Step 3 of a `*_many` call; `items` are the batch outcomes in the order of `plan.ops`.
/// Errors are listed as crud's batch postprocessor collects them: each op that failed on
/// its storage, then the ops not performed, then those rolled back; then the objects that
/// could not be flattened.
pub fn finish_many(
    space: &Space,
    config: &CrudConfig,
    plan: &ManyPlan<'_>,
    items: &[BatchItem],
) -> Vec<u8> {
    debug_assert_eq!(items.len(), plan.ops.len());
    let call_error = |tuple: &OpBytes, message: &str| {
        by_func::many_op_failed(plan.func, &config.instance_uuid, message)
            .with_operation_data(&tuple.bytes())
    };
    let mut errors = Vec::new();
    let mut rows: Vec<&[u8]> = Vec::new();
    let mut done = 0usize;
    for (item, tuple) in items.iter().zip(&plan.tuples) {
        match item {
            BatchItem::Failed(error) => errors.push(call_error(tuple, &error.to_string())),
            BatchItem::Done(row) => {
                done += 1;
                if let Some(row) = row {
                    rows.push(row);
                }
            }
            _ => {}
        }
    }
    for (item, tuple) in items.iter().zip(&plan.tuples) {
        if *item == BatchItem::NotPerformed {
            errors.push(call_error(tuple, "Operation with tuple was not performed"));
        }
    }
    for (item, tuple) in items.iter().zip(&plan.tuples) {
        if *item == BatchItem::RolledBack {
            errors.push(call_error(tuple, "Operation with tuple was rollback"));
        }
    }
    errors.extend(plan.early_errors.iter().cloned());
    let mut result = Vec::new();
    if done > 0 && !plan.noreturn {
        let is_upsert = matches!(plan.func, Func::UpsertMany | Func::UpsertObjectMany);
        result::write_result(
            &mut result,
            &space.format,
            &plan.columns,
            (!is_upsert).then_some(&rows[..]),
        );
    }
    let result = (!result.is_empty()).then_some(&result[..]);
    if errors.is_empty() {
        two(result.unwrap_or(mp::NIL), mp::NIL)
    } else {
        many_errors(result, &errors)
    }
}

/// Step 3 of a select: merges the shards' runs. A shard's error is raised out of crud's
/// merger and returned as a SelectError.
pub fn finish_select<E: std::fmt::Display>(
    space: &Space,
    planned: &Planned,
    shards: Vec<Result<ShardRows, E>>,
) -> Vec<u8> {
    let mut runs = Vec::with_capacity(shards.len());
    for shard in shards {
        match shard {
            Ok(rows) => runs.push(rows),
            Err(error) => return returned_error(&by_func::select_raised(&error.to_string())),
        }
    }
    let tuples = select::merge_rows(&planned.plan, runs);
    let rows: Vec<&[u8]> = tuples.iter().map(Vec::as_slice).collect();
    let mut result = Vec::new();
    result::write_result(&mut result, &space.format, &planned.columns, Some(&rows));
    two(&result, mp::NIL)
}

/// Step 3 of min / max: a storage's error is `Failed to get min: <message>`.
pub fn finish_border<E: std::fmt::Display>(
    space: &Space,
    func: Func,
    plan: &SelectPlan,
    columns: &Columns,
    shards: Vec<Result<ShardRows, E>>,
) -> Vec<u8> {
    let mut runs = Vec::with_capacity(shards.len());
    for shard in shards {
        match shard {
            Ok(rows) => runs.push(rows),
            Err(error) => {
                return returned_error(&by_func::storage_failed(func, &error.to_string()))
            }
        }
    }
    let tuples = select::merge_rows(plan, runs);
    let rows: Vec<&[u8]> = tuples.iter().map(Vec::as_slice).collect();
    let mut result = Vec::new();
    result::write_result(&mut result, &space.format, columns, Some(&rows));
    two(&result, mp::NIL)
}

/// Step 3 of count: `[n, nil]`; a storage's error wrapped as crud wraps it.
pub fn finish_count<E: std::fmt::Display>(
    config: &CrudConfig,
    counts: impl IntoIterator<Item = Result<u64, E>>,
) -> Vec<u8> {
    let mut total = 0u64;
    for count in counts {
        match count {
            Ok(count) => total += count,
            Err(error) => {
                return returned_error(&by_func::count_storage_failed(
                    &config.instance_uuid,
                    &error.to_string(),
                ))
            }
        }
    }
    let mut value = Vec::new();
    write_uint(&mut value, total);
    two(&value, mp::NIL)
}

/// Step 3 of len: one value, `[n]`.
pub fn finish_len(total: u64) -> Vec<u8> {
    let mut out = vec![0x91];
    write_uint(&mut out, total);
    out
}

/// Step 3 of truncate: one value, `[true]`.
pub fn finish_truncate() -> Vec<u8> {
    vec![0x91, 0xc3]
}

/// Runs a whole crud call on one engine: plan, run, finish. The single-shard case of the
/// three steps, and what the unit tests drive.
pub fn execute_on_engine(
    engine: &mut Engine,
    config: &CrudConfig,
    function_name: &str,
    args: &[u8],
) -> CrudReply {
    let plan = match plan(engine, config, function_name, args) {
        Ok(plan) => plan,
        Err(raised) => return CrudReply::Raised(raised),
    };
    CrudReply::Values(run_on_engine(engine, config, plan))
}

fn run_on_engine(engine: &mut Engine, config: &CrudConfig, plan: Plan<'_>) -> Vec<u8> {
    match plan {
        Plan::Reply(values) => values,
        Plan::Point(point) => {
            let outcome = engine
                .space_mut(point.space_id)
                .and_then(|space| write::apply(space, &point.op))
                .map(|applied| applied.row);
            let space = engine.space(point.space_id).expect("planned on this space");
            finish_point(config, space, &point, outcome)
        }
        Plan::Many(many) => {
            let items = write::apply_batch(
                engine,
                many.space_id,
                &many.ops,
                many.stop_on_error,
                many.rollback_on_error,
            );
            let space = engine.space(many.space_id).expect("planned on this space");
            finish_many(space, config, &many, &items)
        }
        Plan::Select(planned) => {
            let rows = select::scan_shard(engine, &planned.plan);
            let space = engine
                .space(planned.plan.space_id)
                .expect("planned on this space");
            finish_select(space, &planned, vec![rows])
        }
        Plan::Border { plan, columns } => {
            let rows = select::scan_shard(engine, &plan);
            let space = engine.space(plan.space_id).expect("planned on this space");
            let func = if plan.iterator == crate::storage::IteratorType::Le {
                Func::Max
            } else {
                Func::Min
            };
            finish_border(space, func, &plan, &columns, vec![rows])
        }
        Plan::Count(plan) => finish_count(config, [select::count_shard(engine, &plan)]),
        Plan::Len { space_id } => {
            finish_len(engine.space(space_id).map_or(0, |space| space.len() as u64))
        }
        Plan::Truncate { space_id } => {
            if let Ok(space) = engine.space_mut(space_id) {
                space.truncate();
            }
            finish_truncate()
        }
    }
}
