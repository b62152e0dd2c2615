//! Step 1 of a crud call, on the accepting core: from a CALL's function name and
//! arguments to a [`Plan`] (what must run where), from the schema alone (every shard holds
//! every space definition). Arguments are decoded and checked as crud's `checks` does,
//! objects flattened, bucket_id filled in, conditions planned; no data is read. A call that
//! cannot be planned is answered here: a raise, or the values crud returns.
//!
//! Must not know: shards, cores, logs (that is [`super::run`]), or how replies are merged
//! ([`super::finish`]).

use super::error::{self, by_func, CrudError};
use super::finish::{many_errors, returned_error};
use super::result::{self, Columns};
use super::write::{OpBytes, PointOp};
use super::{args, box_space, bucket, fast_plan, flatten, mp, select, sites};
use super::{CrudConfig, Func, ManyPlan, Plan, PointPlan, Raised};
use crate::msgpack::{write_array_len, write_str};
use crate::protocol::crud_call;
use crate::protocol::ErrorCode;
use crate::storage::{Engine, Space};

/// The space a call names, or its name when there is none.
pub(super) fn space_named<'e, 'n>(
    engine: &'e Engine,
    name: &'n [u8],
) -> Result<&'e Space, &'n str> {
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
    if box_space::is_box_space_function(function_name) {
        return box_space::plan(engine, function_name, args);
    }
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
    if box_space::is_box_space_function(function_name) {
        return box_space::plan(engine, function_name, args);
    }
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
    // The decoder may have left them unmeasured (`protocol::crud_call`); its error comes first.
    if crud_call::is_torn(args) {
        let error = crud_call::torn_args_error();
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
        Err(Unplanned::Returned(values)) => Ok(Plan::Reply(values)),
        Err(Unplanned::Raised(raised)) => Err(raised),
    }
}

/// How a call that cannot be planned is answered.
enum Unplanned {
    /// Returned values (`[nil, err]` and the like).
    Returned(Vec<u8>),
    /// A Lua error raised out of crud.
    Raised(Raised),
}

impl From<Vec<u8>> for Unplanned {
    fn from(values: Vec<u8>) -> Unplanned {
        Unplanned::Returned(values)
    }
}

fn returned(error: CrudError) -> Unplanned {
    Unplanned::Returned(returned_error(&error))
}

/// A point op's bucket_id error, as the function reports it.
fn bucket_refusal(func: Func, error: flatten::BucketError) -> Unplanned {
    match error {
        flatten::BucketError::Invalid(message) => {
            returned(by_func::bucket_id_failed(func, &message))
        }
        flatten::BucketError::NoRoute(bucket_id) => returned(by_func::no_route(func, &bucket_id)),
    }
}

/// `opts.bucket_id` of get, update and delete: validated, and routed.
fn check_key_bucket_id(func: Func, opts: &args::Opts, bucket_count: u32) -> Result<(), Unplanned> {
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
) -> Result<Plan<'a>, Unplanned> {
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
    let point = |op: PointOp<'a>| -> Result<Plan<'a>, Unplanned> {
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
            return Err(Unplanned::Raised(Raised::lua(format!(
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
                Unplanned::Raised(Raised::lua(format!(
                    "{}attempt to index local 'result' (a nil value)",
                    sites::position(sites::site(sites::BORDERS, 172))
                )))
            })?;
            Ok(Plan::Border { plan, columns })
        }
        Len => Ok(Plan::Len { space_id: space.id }),
        Truncate => Ok(Plan::Truncate {
            space_id: space.id,
            returns_nothing: false,
        }),
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
) -> Result<Plan<'a>, Unplanned> {
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
) -> Result<Plan<'a>, Unplanned> {
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
            return Err(Unplanned::Raised(Raised::lua(format!(
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
        .map_err(|error| Unplanned::from(many_errors(None, &[error])))?;
    if plan.ops.is_empty() {
        return Err(many_errors(None, &plan.early_errors).into());
    }
    Ok(Plan::Many(plan))
}
