//! Step 2 of a crud call, on a shard that holds its data: the one shard-side entry,
//! [`run`], for every kind of [`Work`] a shard is given: a whole call (its IPROTO reply
//! written), a `*_many` call's ops for this shard, or this shard's part of a fanned-out
//! call. Every change is logged to the shard's WAL through `Shard::log`, the same rows an
//! IPROTO request making the change logs; what ran returns the commit of its last row
//! ([`Ran::commit`]), which the caller awaits before the answer leaves, as for any write.
//!
//! When the WAL refuses a row the change is undone (as with `Shard::execute`) and never
//! acknowledged: the call answers `ER_WAL_IO` instead (`shard::errors::encode_log_refused`).
//!
//! Must not know: cores, messages, or how the shards' answers travel (that is the server's).

use super::box_space::BoxSelect;
use super::finish::{
    encode_reply, encode_values_reply, finish_many, finish_parts, write_point_values,
};
use super::result::Columns;
use super::select::{self, ShardRows};
use super::write::{self, BatchItem, PointOp};
use super::{CrudConfig, CrudReply, Plan, PointPlan};
use crate::protocol::reply;
use crate::protocol::request::Request;
use crate::shard::errors::encode_log_refused;
use crate::shard::Shard;
use crate::storage::{Change, IteratorType, StorageError, Tuple};
use crate::wal::{Commit, WalError};

/// What one shard contributes to a fanned-out call (select, min/max, count, len, truncate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Rows(ShardRows),
    Count(u64),
    Done,
    /// A box error, as text.
    Failed(String),
}

/// A `*_many` call's ops that one shard owns, in the call's order; the ops borrow their
/// bytes from the plan or from the message they came in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardOps<'a> {
    pub space_id: u32,
    pub stop_on_error: bool,
    pub rollback_on_error: bool,
    pub ops: Vec<PointOp<'a>>,
}

/// What a shard is given to run of a crud call.
pub enum Work<'w, 'a> {
    /// A whole call, every part of whose data is on this shard; its IPROTO reply (success,
    /// error, or the log's refusal) is appended to `out`.
    Call {
        plan: &'w Plan<'a>,
        sync: u64,
        schema_version: u64,
        out: &'w mut Vec<u8>,
    },
    /// A `*_many` call's ops for this shard: answered with their outcomes.
    Ops(&'w ShardOps<'a>),
    /// This shard's part of a call every shard runs (select, count, min/max, len,
    /// truncate).
    Part(&'w Plan<'a>),
}

/// What [`run`] answered.
#[derive(Debug)]
pub enum Answer {
    /// [`Work::Call`]: the reply is in its `out`.
    Replied,
    /// [`Work::Ops`]: one outcome per op, in order.
    Items(Vec<BatchItem>),
    /// [`Work::Part`]: this shard's part.
    Part(Part),
    /// [`Work::Ops`] or [`Work::Part`]: the WAL refused their rows (undone already).
    Refused(WalError),
}

/// What [`run`] produced, and the WAL commit of its last row, which covers every row before
/// it: the answer may leave only once that commit is durable.
#[must_use = "a write's answer must wait for its commit"]
pub struct Ran {
    pub answer: Answer,
    pub commit: Option<Commit>,
}

/// Runs `work` on `shard`: the one shard-side entry of crud.
pub fn run(shard: &mut Shard, config: &CrudConfig, work: Work<'_, '_>) -> Ran {
    match work {
        Work::Call {
            plan,
            sync,
            schema_version,
            out,
        } => Ran {
            answer: Answer::Replied,
            commit: run_call(shard, config, plan, sync, schema_version, out),
        },
        Work::Ops(ops) => {
            let ran = run_ops(
                shard,
                ops.space_id,
                &ops.ops,
                ops.stop_on_error,
                ops.rollback_on_error,
            );
            answered(ran, Answer::Items)
        }
        Work::Part(plan) => answered(run_part(shard, plan), Answer::Part),
    }
}

/// Plans a CALL and [`run`]s it whole on this shard, or writes the raise that planning
/// answered: what the tests and benchmarks drive as one step.
pub fn plan_and_run(
    shard: &mut Shard,
    config: &CrudConfig,
    sync: u64,
    schema_version: u64,
    function_name: &str,
    args: &[u8],
    out: &mut Vec<u8>,
) -> Ran {
    match super::plan(&shard.engine, config, function_name, args) {
        Ok(plan) => {
            let work = Work::Call {
                plan: &plan,
                sync,
                schema_version,
                out,
            };
            run(shard, config, work)
        }
        Err(raised) => {
            encode_reply(out, sync, schema_version, &CrudReply::Raised(raised));
            Ran {
                answer: Answer::Replied,
                commit: None,
            }
        }
    }
}

/// A value logged with the commit of its last row.
struct Logged<T> {
    value: T,
    commit: Option<Commit>,
}

impl<T> Logged<T> {
    fn unlogged(value: T) -> Logged<T> {
        Logged {
            value,
            commit: None,
        }
    }
}

fn answered<T>(ran: Result<Logged<T>, WalError>, answer: fn(T) -> Answer) -> Ran {
    match ran {
        Ok(logged) => Ran {
            answer: answer(logged.value),
            commit: logged.commit,
        },
        Err(error) => Ran {
            answer: Answer::Refused(error),
            commit: None,
        },
    }
}

/// A whole call on this shard, its reply appended to `out`; returns the commit it waits
/// for. A point op's values are written in place (the hot path: no intermediate buffer).
fn run_call(
    shard: &mut Shard,
    config: &CrudConfig,
    plan: &Plan,
    sync: u64,
    schema_version: u64,
    out: &mut Vec<u8>,
) -> Option<Commit> {
    let ran = match plan {
        Plan::Point(point) => {
            return run_point_into(shard, config, point, sync, schema_version, out)
        }
        Plan::Reply(values) => Ok(Logged::unlogged(values.clone())),
        Plan::BoxSelect(select) => {
            run_box_select(shard, select, sync, schema_version, out);
            return None;
        }
        Plan::BoxWrite(write) => {
            // One shard holds everything here: a moved primary key has no other owner.
            let executed = shard.execute(sync, schema_version, &write.request(), None, out);
            return executed.commit;
        }
        Plan::Many(many) => {
            let ran = run_ops(
                shard,
                many.space_id,
                &many.ops,
                many.stop_on_error,
                many.rollback_on_error,
            );
            ran.map(|ran| {
                let space = shard.engine.space(many.space_id).expect("planned");
                Logged {
                    value: finish_many(space, config, many, &ran.value),
                    commit: ran.commit,
                }
            })
        }
        _ => run_part(shard, plan).map(|logged| Logged {
            value: finish_parts(&shard.engine, config, plan, vec![logged.value]),
            commit: logged.commit,
        }),
    };
    match ran {
        Ok(logged) => {
            encode_reply(out, sync, schema_version, &CrudReply::Values(logged.value));
            logged.commit
        }
        Err(error) => {
            encode_log_refused(out, sync, schema_version, Some(&error));
            None
        }
    }
}

/// A point op on its owner shard, through `write::apply_point`: the op's outcome (a box
/// error is an outcome), or the WAL's refusal of its row. Inserts and replaces, most
/// writes, usually take [`write_into`] instead, which writes their reply straight from
/// the stored tuple.
fn run_point(
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
fn run_ops(
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
fn run_part(shard: &mut Shard, plan: &Plan) -> Result<Logged<Part>, WalError> {
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
        Plan::Sum(sum) => match sum.count(&shard.engine) {
            Ok(count) => Part::Count(count),
            Err(error) => Part::Failed(error.to_string()),
        },
        Plan::Truncate { space_id, .. } => {
            return Ok(Logged {
                value: Part::Done,
                commit: truncate_logged(shard, *space_id)?,
            });
        }
        Plan::Reply(_)
        | Plan::Point(_)
        | Plan::Many(_)
        | Plan::BoxSelect(_)
        | Plan::BoxWrite(_) => {
            debug_assert!(false, "not a fanned-out plan: {plan:?}");
            Part::Done
        }
    };
    Ok(Logged::unlogged(part))
}

/// A `box.space` select on this shard, which holds all its data: the SELECT's reply, its
/// tuples made one list where the method returns one.
fn run_box_select(
    shard: &mut Shard,
    select: &BoxSelect,
    sync: u64,
    schema_version: u64,
    out: &mut Vec<u8>,
) {
    let start = out.len();
    let request = Request::Select(select.request());
    let executed = shard.execute(sync, schema_version, &request, None, out);
    debug_assert!(executed.commit.is_none(), "a select writes nothing");
    if select.one_list {
        reply::wrap_data_in_one_list(out, start);
    }
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
            Ok(entries) => entries.map(|(_, tuple)| tuple.to_tuple()).collect(),
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

/// [`run_planned_into`] of a point op.
fn run_point_into(
    shard: &mut Shard,
    config: &CrudConfig,
    point: &PointPlan<'_>,
    sync: u64,
    schema_version: u64,
    out: &mut Vec<u8>,
) -> Option<Commit> {
    if let Some(commit) = write_into(shard, config, point, sync, schema_version, out) {
        return commit;
    }
    match run_point(shard, point) {
        Ok(logged) => {
            let space = shard.engine.space(point.space_id).expect("planned");
            encode_values_reply(out, sync, schema_version, |out| {
                write_point_values(out, config, space, point, logged.value)
            });
            logged.commit
        }
        Err(error) => {
            encode_log_refused(out, sync, schema_version, Some(&error));
            None
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
) -> Option<Option<Commit>> {
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
        return Some(None);
    };
    match shard.log(point.space_id, change) {
        Ok(commit) => Some(commit),
        Err(error) => {
            out.truncate(start);
            encode_log_refused(out, sync, schema_version, Some(&error));
            Some(None)
        }
    }
}
