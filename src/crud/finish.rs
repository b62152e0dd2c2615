//! Step 3 of a crud call, on the accepting core: the shards' outcomes merged into the
//! CALL's return values (`finish_*`), and those wrapped into the IPROTO reply
//! ([`encode_reply`], [`encode_values_reply`]).
//!
//! Must not know: how the outcomes were gathered (one shard or many, see [`super::run`]).

use super::error::{by_func, CrudError};
use super::result::{self, Columns};
use super::run::Part;
use super::select::{self, Planned, SelectPlan, ShardRows};
use super::write::{BatchItem, OpBytes, PointOp};
use super::{mp, CrudConfig, CrudReply, Func, ManyPlan, Plan, PointPlan, Raised};
use crate::msgpack::{write_array_len, write_uint};
use crate::protocol::reply;
use crate::protocol::reply::ErrorEntry as ReplyErrorEntry;
use crate::protocol::ErrorCode;
use crate::storage::{Engine, IteratorType, Space};

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

/// `[a, b]` from two encoded values.
pub(super) fn two(first: &[u8], second: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(first.len() + second.len() + 1);
    write_array_len(&mut out, 2);
    out.extend_from_slice(first);
    out.extend_from_slice(second);
    out
}

/// `[nil, err]`.
pub(super) fn returned_error(error: &CrudError) -> Vec<u8> {
    let mut encoded = Vec::new();
    error.write(&mut encoded);
    two(mp::NIL, &encoded)
}

/// `[nil, [err, ...]]` or `[result, [err, ...]]`.
pub(super) fn many_errors(result: Option<&[u8]>, errors: &[CrudError]) -> Vec<u8> {
    let mut list = Vec::new();
    write_array_len(&mut list, errors.len() as u32);
    for error in errors {
        error.write(&mut list);
    }
    two(result.unwrap_or(mp::NIL), &list)
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

/// What a planned call answers when the instance refuses every write with the box error
/// `code` and `message` (ER_READONLY on a read-only instance), in place of running it;
/// `None` for a plan that writes nothing. crud's calls keep crud's shapes with the box
/// error inside, as when their storage refuses each write: a point op's `<Op>Error`
/// (`Failed to insert: <message>`), a `*_many` call's CallError per op (with
/// `stop_on_error`, the ops after the first not performed), truncate's TruncateError.
/// `box.space`'s writes and truncate raise the box error itself.
pub fn refuse_writes(
    engine: &Engine,
    config: &CrudConfig,
    plan: &Plan<'_>,
    code: ErrorCode,
    message: &str,
) -> Option<CrudReply> {
    let raised = || {
        CrudReply::Raised(Raised {
            code,
            message: message.to_owned(),
        })
    };
    let values = match plan {
        Plan::Point(point) if matches!(point.op, PointOp::Get { .. }) => return None,
        Plan::Point(point) => returned_error(&by_func::storage_failed(point.func, message)),
        Plan::Many(many) => {
            // Planned on this engine's schema, which has not changed since.
            let Ok(space) = engine.space(many.space_id) else {
                return Some(raised());
            };
            let mut failed = false;
            let items: Vec<BatchItem> = many
                .ops
                .iter()
                .map(|_| {
                    if failed && many.stop_on_error {
                        return BatchItem::NotPerformed;
                    }
                    failed = true;
                    BatchItem::Failed(message.to_owned())
                })
                .collect();
            finish_many(space, config, many, &items)
        }
        Plan::Truncate {
            returns_nothing: false,
            ..
        } => returned_error(&by_func::truncate_failed(&config.instance_uuid, message)),
        Plan::Truncate { .. } | Plan::BoxWrite(_) => return Some(raised()),
        Plan::Reply(_)
        | Plan::Select(_)
        | Plan::Count(_)
        | Plan::Border { .. }
        | Plan::Len { .. }
        | Plan::BoxSelect(_)
        | Plan::Sum(_) => return None,
    };
    Some(CrudReply::Values(values))
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

/// Step 3 of a fanned-out call, from every shard's part (any order: the merge sorts).
pub fn finish_parts(
    engine: &Engine,
    config: &CrudConfig,
    plan: &Plan,
    parts: Vec<Part>,
) -> Vec<u8> {
    let rows = |parts: Vec<Part>| -> Vec<Result<ShardRows, String>> {
        parts
            .into_iter()
            .map(|part| match part {
                Part::Rows(rows) => Ok(rows),
                Part::Failed(message) => Err(message),
                other => Err(format!("unexpected shard part {other:?}")),
            })
            .collect()
    };
    let counts = |parts: Vec<Part>| -> Vec<Result<u64, String>> {
        parts
            .into_iter()
            .map(|part| match part {
                Part::Count(count) => Ok(count),
                Part::Failed(message) => Err(message),
                other => Err(format!("unexpected shard part {other:?}")),
            })
            .collect()
    };
    let space_of = |space_id: u32| engine.space(space_id).expect("planned on this space");
    match plan {
        Plan::Select(planned) => {
            finish_select(space_of(planned.plan.space_id), planned, rows(parts))
        }
        Plan::Border { plan, columns } => {
            let func = if plan.iterator == IteratorType::Le {
                Func::Max
            } else {
                Func::Min
            };
            finish_border(space_of(plan.space_id), func, plan, columns, rows(parts))
        }
        Plan::Count(_) => finish_count(config, counts(parts)),
        Plan::Len { .. } => finish_len(counts(parts).into_iter().flatten().sum()),
        // Planned where every shard accepts it (see `box_space`): a shard's error is not
        // a box error.
        Plan::Sum(_) => finish_len(counts(parts).into_iter().flatten().sum()),
        Plan::Truncate {
            returns_nothing: true,
            ..
        } => vec![0x90],
        Plan::Truncate { .. } => finish_truncate(),
        Plan::Reply(_)
        | Plan::Point(_)
        | Plan::Many(_)
        | Plan::BoxSelect(_)
        | Plan::BoxWrite(_) => {
            unreachable!("not a fanned-out plan: {plan:?}")
        }
    }
}
