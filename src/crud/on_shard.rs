//! Step 2 on a real shard: a planned call's work run on the [`Shard`] that holds the data,
//! with every change logged to that shard's WAL through `Shard::log` — the same rows an
//! IPROTO request making the change logs. What ran returns the commit of its last row
//! ([`Logged`], or `Shard`'s `Executed` once the reply is written), which the caller awaits
//! before the answer leaves, as for any write.
//!
//! Also the whole call on one shard ([`execute_on_shard`]): what a one-shard server runs,
//! what the owner of a forwarded point op runs, and what the benchmark times.
//!
//! When the WAL refuses a row the change is undone (as with `Shard::execute`) and never
//! acknowledged: the call raises `ER_WAL_IO` instead.

use super::result::Columns;
use super::select::{self, ShardRows};
use super::write::{self, BatchItem, PointOp};
use super::{
    encode_reply, encode_values_reply, fast_plan, finish_border, finish_count, finish_len,
    finish_many, finish_point, finish_select, finish_truncate, func_or_raised, plan_func,
    write_point_values, CrudConfig, CrudReply, Func, Plan, PointPlan,
};
use crate::shard::errors::encode_log_refused;
use crate::shard::{Executed, Shard};
use crate::storage::{Change, Engine, IteratorType, StorageError, Tuple};
use crate::wal::{Commit, WalError};

/// What shard-side work produced, and the WAL commit of its last row (which covers every
/// row before it): the answer may leave only once that commit is durable.
#[must_use = "a write's answer must wait for its commit"]
pub struct Logged<T> {
    pub value: T,
    pub commit: Option<Commit>,
}

impl<T> Logged<T> {
    fn unlogged(value: T) -> Logged<T> {
        Logged {
            value,
            commit: None,
        }
    }
}

/// What one shard contributes to a fanned-out call (select, min/max, count, len, truncate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Rows(ShardRows),
    Count(u64),
    Done,
    /// A box error, as text.
    Failed(String),
}

/// A point op on its owner shard, through `write::apply_point`: the op's outcome (a box
/// error is an outcome), or the WAL's refusal of its row. Inserts and replaces, most
/// writes, usually take [`write_into`] instead, which writes their reply straight from
/// the stored tuple.
pub fn run_point(
    shard: &mut Shard,
    plan: &PointPlan<'_>,
) -> Result<Logged<Result<Option<Tuple>, StorageError>>, WalError> {
    let applied = match shard
        .engine
        .space_mut(plan.space_id)
        .and_then(|space| write::apply_point(space, &plan.op))
    {
        Ok(applied) => applied,
        Err(error) => return Ok(Logged::unlogged(Err(error))),
    };
    let commit = shard.log(plan.space_id, applied.change)?;
    Ok(Logged {
        value: Ok(applied.row),
        commit,
    })
}

/// A `*_many` call's ops for this shard, in order (`write::apply_batch`), each change
/// logged.
pub fn run_ops(
    shard: &mut Shard,
    space_id: u32,
    ops: &[PointOp<'_>],
    stop_on_error: bool,
    rollback_on_error: bool,
) -> Result<Logged<Vec<BatchItem>>, WalError> {
    let mut changes = Vec::new();
    let items = write::apply_batch_logged(
        &mut shard.engine,
        space_id,
        ops,
        stop_on_error,
        rollback_on_error,
        &mut changes,
    );
    let commit = shard.log_all(space_id, changes)?;
    Ok(Logged {
        value: items,
        commit,
    })
}

/// This shard's part of a fanned-out call: select, min/max, count, len or truncate.
pub fn run_part(shard: &mut Shard, plan: &Plan) -> Result<Logged<Part>, WalError> {
    let rows = |found: Result<ShardRows, StorageError>| match found {
        Ok(rows) => Part::Rows(rows),
        Err(error) => Part::Failed(error.to_string()),
    };
    let part = match plan {
        Plan::Select(planned) => rows(select::scan_shard(&shard.engine, &planned.plan)),
        Plan::Border { plan, .. } => rows(select::scan_shard(&shard.engine, plan)),
        Plan::Count(plan) => match select::count_shard(&shard.engine, plan) {
            Ok(count) => Part::Count(count),
            Err(error) => Part::Failed(error.to_string()),
        },
        Plan::Len { space_id } => Part::Count(
            shard
                .engine
                .space(*space_id)
                .map_or(0, |space| space.len() as u64),
        ),
        Plan::Truncate { space_id } => {
            return Ok(Logged {
                value: Part::Done,
                commit: truncate_logged(shard, *space_id)?,
            });
        }
        Plan::Reply(_) | Plan::Point(_) | Plan::Many(_) => {
            debug_assert!(false, "not a fanned-out plan: {plan:?}");
            Part::Done
        }
    };
    Ok(Logged::unlogged(part))
}

/// Empties a space. The WAL has no truncate row, so every tuple is logged as deleted (one
/// row each; the rows share one WAL write); recovery then replays the same emptying. If the
/// log refuses them, the tuples are put back.
fn truncate_logged(shard: &mut Shard, space_id: u32) -> Result<Option<Commit>, WalError> {
    let Ok(space) = shard.engine.space_mut(space_id) else {
        return Ok(None);
    };
    let deleted: Vec<Tuple> = match shard.wal.is_some() {
        true => match space.select(0, IteratorType::All as u32, &[0x90]) {
            Ok(entries) => entries.map(|(_, tuple)| tuple.clone()).collect(),
            Err(_) => Vec::new(),
        },
        false => Vec::new(),
    };
    space.truncate();
    let changes = deleted.into_iter().map(|old| Change {
        old: Some(old),
        new: None,
    });
    shard.log_all(space_id, changes)
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
        Plan::Truncate { .. } => finish_truncate(),
        Plan::Reply(_) | Plan::Point(_) | Plan::Many(_) => {
            unreachable!("not a fanned-out plan: {plan:?}")
        }
    }
}

/// Runs a planned call wholly on this shard (every part of it is here) and returns its
/// values, with the commit of the changes it logged; or the log's refusal of them.
pub fn run_planned(
    shard: &mut Shard,
    config: &CrudConfig,
    plan: &Plan,
) -> Result<Logged<Vec<u8>>, WalError> {
    Ok(match plan {
        Plan::Reply(values) => Logged::unlogged(values.clone()),
        Plan::Point(point) => {
            let logged = run_point(shard, point)?;
            let space = shard.engine.space(point.space_id).expect("planned");
            Logged {
                value: finish_point(config, space, point, logged.value),
                commit: logged.commit,
            }
        }
        Plan::Many(many) => {
            let ran = run_ops(
                shard,
                many.space_id,
                &many.ops,
                many.stop_on_error,
                many.rollback_on_error,
            )?;
            let space = shard.engine.space(many.space_id).expect("planned");
            Logged {
                value: finish_many(space, config, many, &ran.value),
                commit: ran.commit,
            }
        }
        _ => {
            let logged = run_part(shard, plan)?;
            Logged {
                value: finish_parts(&shard.engine, config, plan, vec![logged.value]),
                commit: logged.commit,
            }
        }
    })
}

/// [`run_planned`], appending the IPROTO reply packet to `out`; a point op's values are
/// written in place (the hot path: no intermediate buffer).
pub fn run_planned_into(
    shard: &mut Shard,
    config: &CrudConfig,
    plan: &Plan,
    sync: u64,
    schema_version: u64,
    out: &mut Vec<u8>,
) -> Executed {
    let Plan::Point(point) = plan else {
        return match run_planned(shard, config, plan) {
            Ok(logged) => {
                encode_reply(out, sync, schema_version, &CrudReply::Values(logged.value));
                Executed::waiting_for(logged.commit)
            }
            Err(error) => {
                encode_log_refused(out, sync, schema_version, Some(&error));
                Executed::default()
            }
        };
    };
    run_point_into(shard, config, point, sync, schema_version, out)
}

/// [`run_planned_into`] of a point op.
fn run_point_into(
    shard: &mut Shard,
    config: &CrudConfig,
    point: &PointPlan<'_>,
    sync: u64,
    schema_version: u64,
    out: &mut Vec<u8>,
) -> Executed {
    if let Some(written) = write_into(shard, config, point, sync, schema_version, out) {
        return written;
    }
    match run_point(shard, point) {
        Ok(logged) => {
            let space = shard.engine.space(point.space_id).expect("planned");
            encode_values_reply(out, sync, schema_version, |out| {
                write_point_values(out, config, space, point, logged.value)
            });
            Executed::waiting_for(logged.commit)
        }
        Err(error) => {
            encode_log_refused(out, sync, schema_version, Some(&error));
            Executed::default()
        }
    }
}

/// [`run_planned_into`] of an insert or a replace, the most common writes: the reply is
/// written from the space the write borrowed and the outcome never travels through
/// [`run_point`]'s nested results. The same bytes as the general path; a refused WAL row
/// takes back the success reply written ahead of it. `None` (nothing done) for other ops
/// and when the space is missing: the general path answers those.
fn write_into(
    shard: &mut Shard,
    config: &CrudConfig,
    point: &PointPlan<'_>,
    sync: u64,
    schema_version: u64,
    out: &mut Vec<u8>,
) -> Option<Executed> {
    let Ok(space) = shard.engine.space_mut(point.space_id) else {
        return None;
    };
    let stored = point.op.store_into(space)?;
    let start = out.len();
    let space = &*space;
    let outcome = stored.as_ref().map(|change| change.new.as_ref());
    encode_values_reply(out, sync, schema_version, |out| match outcome {
        // `[{metadata, rows: [new]}, nil]`, as write_point_values writes it, without its
        // general cases (errors, noreturn, chosen fields).
        Ok(Some(new)) if !point.noreturn && matches!(point.columns, Columns::All) => {
            out.push(0x92);
            config.metadata.write_result_all(out, space, &[new.data()]);
            out.push(0xc0);
        }
        _ => write_point_values(out, config, space, point, outcome),
    });
    let Ok(change) = stored else {
        return Some(Executed::default());
    };
    match shard.log(point.space_id, change) {
        Ok(commit) => Some(Executed::waiting_for(commit)),
        Err(error) => {
            out.truncate(start);
            encode_log_refused(out, sync, schema_version, Some(&error));
            Some(Executed::default())
        }
    }
}

/// A whole crud CALL on this one shard: plan, run, finish, and the IPROTO reply appended to
/// `out`; returns the commit the reply waits for.
pub fn execute_on_shard(
    shard: &mut Shard,
    config: &CrudConfig,
    sync: u64,
    schema_version: u64,
    function_name: &str,
    args: &[u8],
    out: &mut Vec<u8>,
) -> Executed {
    // `plan`, with the common point calls run straight from their one-pass plan: no
    // `Plan` is built around them, moved or dropped.
    let func = match func_or_raised(function_name) {
        Ok(func) => func,
        Err(raised) => {
            encode_reply(out, sync, schema_version, &CrudReply::Raised(raised));
            return Executed::default();
        }
    };
    // Borrowed where it was returned: a point plan is large, and moving it costs stores.
    let point = fast_plan::plan_point(&shard.engine, config, func, args);
    if let Some(point) = &point {
        return run_point_into(shard, config, point, sync, schema_version, out);
    }
    match plan_func(&shard.engine, config, func, args) {
        Ok(plan) => run_planned_into(shard, config, &plan, sync, schema_version, out),
        Err(raised) => {
            encode_reply(out, sync, schema_version, &CrudReply::Raised(raised));
            Executed::default()
        }
    }
}
