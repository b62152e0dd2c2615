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
pub mod wire;
pub mod write;

#[cfg(test)]
mod tests;

use crate::protocol::reply;
use crate::protocol::reply::ErrorEntry as ReplyErrorEntry;
use crate::protocol::ErrorCode;
use crate::storage::msgpack::{write_array_len, write_str, write_uint};
use crate::storage::{Engine, Space};
pub use args::{Func, Raised};
use error::CrudError;
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

fn func_error(func: Func, err: impl Into<String>) -> CrudError {
    CrudError::new(func.error_class(), func.source_file(), err)
}

fn space_or_error<'e>(engine: &'e Engine, func: Func, name: &[u8]) -> Result<&'e Space, CrudError> {
    if let Some(space) = mp::str_bytes(name).and_then(|name| engine.space_named(name)) {
        return Ok(space);
    }
    let name = mp::as_str(name).unwrap_or_default();
    Err(func_error(func, error::no_such_space(name)))
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
    let parsed = args::parse(func, args)?;
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
    Ok(plan_data(engine, config, func, &parsed).unwrap_or_else(Plan::Reply))
}

/// Plans a call on a space; `Err` is the finished answer (a returned error).
fn plan_data<'a>(
    engine: &Engine,
    config: &CrudConfig,
    func: Func,
    parsed: &args::Args<'a>,
) -> Result<Plan<'a>, Vec<u8>> {
    use Func::*;
    let opts = &parsed.opts;
    if func.is_many() && mp::array_items(parsed.get(1)).is_some_and(|items| items.is_empty()) {
        return Err(many_errors(
            None,
            &[func_error(func, "At least one tuple expected")],
        ));
    }
    let space =
        space_or_error(engine, func, parsed.get(0)).map_err(|error| match func.is_many() {
            true => many_errors(None, &[error]),
            false => returned_error(&error),
        })?;
    let exact_columns =
        || result::resolve_fields(&space.format, opts.fields).map_err(|e| returned_error(&e));
    let with_bucket = |tuple: &'a [u8]| {
        flatten::set_bucket_id(space, tuple, opts.bucket_id, config.bucket_count)
            .map_err(|err| returned_error(&func_error(func, err)))
    };
    let flat_with_bucket = |object: &[u8]| {
        let flat = flatten::flatten(space, object, opts.skip_nullability_check_on_flatten)
            .map_err(|message| {
                returned_error(&func_error(func, flatten::flatten_error_text(&message)))
            })?;
        owned_with_bucket(space, flat, opts.bucket_id, config.bucket_count)
            .map_err(|err| returned_error(&func_error(func, err)))
    };
    let point = |op: PointOp<'a>| -> Result<Plan<'a>, Vec<u8>> {
        Ok(Plan::Point(PointPlan {
            func,
            space_id: space.id,
            op,
            columns: exact_columns()?,
            noreturn: opts.noreturn,
        }))
    };
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
        InsertMany | InsertObjectMany | ReplaceMany | ReplaceObjectMany | UpsertMany
        | UpsertObjectMany => plan_many(space, config, func, parsed),
        Select | Count => {
            if opts.yield_every.is_some_and(|every| every <= 0.0) {
                return Err(returned_error(&func_error(
                    func,
                    "yield_every should be > 0",
                )));
            }
            let (fields, first, after) = match func {
                Select => (opts.fields, opts.first, opts.after),
                _ => (None, None, None),
            };
            let planned = select::plan_select(space, parsed.get(1), fields, first, after).map_err(
                |error| match error {
                    select::PlanError::Text(text) => returned_error(&func_error(func, text)),
                    select::PlanError::Error(error) => returned_error(&error),
                },
            )?;
            Ok(match func {
                Select => Plan::Select(planned),
                _ => Plan::Count(planned.plan),
            })
        }
        Min | Max => {
            let plan = select::plan_border(space, parsed.get(1), func == Max)
                .map_err(|text| returned_error(&func_error(func, text)))?;
            Ok(Plan::Border {
                plan,
                columns: exact_columns()?,
            })
        }
        Len => Ok(Plan::Len { space_id: space.id }),
        Truncate => Ok(Plan::Truncate { space_id: space.id }),
        Pairs | StorageInfo | Stats => unreachable!("answered before planning"),
    }
}

/// [`flatten::set_bucket_id`] of a tuple built here (a flattened object): kept as it is
/// when no field needs filling.
fn owned_with_bucket(
    space: &Space,
    tuple: Vec<u8>,
    opts_bucket_id: Option<&[u8]>,
    bucket_count: u32,
) -> Result<OpBytes<'static>, String> {
    let filled = match flatten::set_bucket_id(space, &tuple, opts_bucket_id, bucket_count)? {
        OpBytes::Borrowed(_) => None,
        filled => Some(filled.into_owned()),
    };
    Ok(filled.unwrap_or_else(|| tuple.into()))
}

fn plan_many<'a>(
    space: &Space,
    config: &CrudConfig,
    func: Func,
    parsed: &args::Args<'a>,
) -> Result<Plan<'a>, Vec<u8>> {
    let opts = &parsed.opts;
    let columns =
        result::resolve_fields(&space.format, opts.fields).map_err(|e| many_errors(None, &[e]))?;
    let items = mp::array_items(parsed.get(1)).unwrap_or_default();
    let mut plan = ManyPlan {
        func,
        space_id: space.id,
        ops: Vec::with_capacity(items.len()),
        tuples: Vec::with_capacity(items.len()),
        early_errors: Vec::new(),
        stop_on_error: opts.stop_on_error,
        rollback_on_error: opts.rollback_on_error,
        noreturn: opts.noreturn,
        columns,
    };
    let is_upsert = matches!(func, Func::UpsertMany | Func::UpsertObjectMany);
    for item in items {
        let (data, ops) = if is_upsert {
            let pair = mp::array_items(item).unwrap_or_default();
            (
                pair.first().copied().unwrap_or(mp::NIL),
                pair.get(1).copied().unwrap_or(&[0x90][..]),
            )
        } else {
            (item, &[][..])
        };
        let tuple = if func.is_object() {
            flatten::flatten(space, data, opts.skip_nullability_check_on_flatten)
                .map_err(|message| flatten::flatten_error_text(&message))
                .and_then(|tuple| owned_with_bucket(space, tuple, None, config.bucket_count))
        } else {
            flatten::set_bucket_id(space, data, None, config.bucket_count)
        };
        let tuple = match tuple {
            Ok(tuple) => tuple,
            Err(text) => {
                let error = func_error(func, text).with_operation_data(data);
                if opts.stop_on_error {
                    return Err(many_errors(None, &[error]));
                }
                plan.early_errors.push(error);
                continue;
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
    Ok(Plan::Many(plan))
}

fn box_error(func: Func, error: &dyn std::fmt::Display) -> CrudError {
    func_error(func, format!("Failed to {}: {error}", func.verb()))
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
        Err(error) => return out.extend_from_slice(&returned_error(&box_error(plan.func, &error))),
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
/// Errors are listed as crud lists them: planning failures, then failed ops, then the
/// ops not performed, then the ops rolled back.
pub fn finish_many(
    space: &Space,
    config: &CrudConfig,
    plan: &ManyPlan<'_>,
    items: &[BatchItem],
) -> Vec<u8> {
    debug_assert_eq!(items.len(), plan.ops.len());
    let call_error = |tuple: &OpBytes, message: &str| {
        CrudError::new(
            "CallError",
            "crud/common/call.lua",
            format!(
                "Failed for {}: Function returned an error: {message}",
                config.instance_uuid
            ),
        )
        .with_operation_data(&tuple.bytes())
    };
    let mut errors = plan.early_errors.clone();
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

/// Step 3 of a select: merges the shards' runs.
pub fn finish_select<E: std::fmt::Display>(
    space: &Space,
    planned: &Planned,
    shards: Vec<Result<ShardRows, E>>,
) -> Vec<u8> {
    let mut runs = Vec::with_capacity(shards.len());
    for shard in shards {
        match shard {
            Ok(rows) => runs.push(rows),
            Err(error) => return returned_error(&func_error(Func::Select, error.to_string())),
        }
    }
    let tuples = select::merge_rows(&planned.plan, runs);
    let rows: Vec<&[u8]> = tuples.iter().map(Vec::as_slice).collect();
    let mut result = Vec::new();
    result::write_result(&mut result, &space.format, &planned.columns, Some(&rows));
    two(&result, mp::NIL)
}

/// Step 3 of min / max.
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
            Err(error) => return returned_error(&func_error(func, error.to_string())),
        }
    }
    let tuples = select::merge_rows(plan, runs);
    let rows: Vec<&[u8]> = tuples.iter().map(Vec::as_slice).collect();
    let mut result = Vec::new();
    result::write_result(&mut result, &space.format, columns, Some(&rows));
    two(&result, mp::NIL)
}

/// Step 3 of count: `[n, nil]`.
pub fn finish_count<E: std::fmt::Display>(
    counts: impl IntoIterator<Item = Result<u64, E>>,
) -> Vec<u8> {
    let mut total = 0u64;
    for count in counts {
        match count {
            Ok(count) => total += count,
            Err(error) => return returned_error(&func_error(Func::Count, error.to_string())),
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
        Plan::Count(plan) => finish_count([select::count_shard(engine, &plan)]),
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
