//! crud's error objects (the `errors` module's): string-keyed maps `{line, class_name, err,
//! file, [stack], [operation_data], str}` returned as the second value of a call (spec
//! §18.3), keyed in the order crud's router sends them.
//!
//! `str` is always `class_name .. ": " .. err`. `file` and `line` are where crud created the
//! object ([`sites`](super::sites)); `stack` is present for the classes that capture one
//! (SelectError, CallError, SplitTuplesError), and an error wrapped into another one's text
//! (`"Failed to truncate: %s"`) is printed with its stack, as Lua's `tostring` of an error
//! object prints it ([`CrudError::tostring`]).

use super::mp::write_map_len;
use super::sites::{short_src, Site};
use crate::msgpack::{write_str, write_uint};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrudError {
    pub class_name: &'static str,
    pub err: String,
    /// Where crud created it.
    pub at: Site,
    /// `debug.traceback` text, for the classes that capture one.
    pub stack: Option<String>,
    /// Raw msgpack of the tuple or object concerned (`*_many` only).
    pub operation_data: Option<Vec<u8>>,
}

impl CrudError {
    pub fn new(class_name: &'static str, at: Site, err: impl Into<String>) -> Self {
        CrudError {
            class_name,
            err: err.into(),
            at,
            stack: None,
            operation_data: None,
        }
    }

    pub fn with_stack(mut self, stack: String) -> Self {
        self.stack = Some(stack);
        self
    }

    pub fn with_operation_data(mut self, data: &[u8]) -> Self {
        self.operation_data = Some(data.to_vec());
        self
    }

    /// `<class_name>: <err>`.
    pub fn str(&self) -> String {
        format!("{}: {}", self.class_name, self.err)
    }

    /// What Lua's `tostring` of the object prints (and so what `"%s"` puts into the text of
    /// an error that wraps it): `str`, then the stack on the next line when there is one.
    pub fn tostring(&self) -> String {
        match &self.stack {
            Some(stack) => format!("{}\n{stack}", self.str()),
            None => self.str(),
        }
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        let keys = 5 + u32::from(self.stack.is_some()) + u32::from(self.operation_data.is_some());
        write_map_len(out, keys);
        write_str(out, b"line");
        write_uint(out, u64::from(self.at.line));
        write_str(out, b"class_name");
        write_str(out, self.class_name.as_bytes());
        write_str(out, b"err");
        write_str(out, self.err.as_bytes());
        write_str(out, b"file");
        write_str(out, short_src(self.at.file).as_bytes());
        if let Some(stack) = &self.stack {
            write_str(out, b"stack");
            write_str(out, stack.as_bytes());
        }
        if let Some(data) = &self.operation_data {
            write_str(out, b"operation_data");
            out.extend_from_slice(data);
        }
        write_str(out, b"str");
        write_str(out, self.str().as_bytes());
    }
}

/// `Space "<name>" doesn't exist`.
pub fn no_such_space(name: &str) -> String {
    format!("Space \"{name}\" doesn't exist")
}

/// The errors each crud function returns, created where crud 1.7.5 creates them
/// (`docs/crud-reference.md` cites each line).
pub mod by_func {
    use super::super::sites::{self as s, site, Frame, Site};
    use super::super::Func;
    use super::CrudError;

    /// The router-side file of a function (its `<Op>Error`s are created there).
    fn file(func: Func) -> &'static str {
        use Func::*;
        match func {
            Insert | InsertObject => s::INSERT,
            InsertMany | InsertObjectMany => s::INSERT_MANY,
            Replace | ReplaceObject => s::REPLACE,
            ReplaceMany | ReplaceObjectMany => s::REPLACE_MANY,
            Upsert | UpsertObject => s::UPSERT,
            UpsertMany | UpsertObjectMany => s::UPSERT_MANY,
            Update => s::UPDATE,
            Delete => s::DELETE,
            Get => s::GET,
            Select | Pairs => s::SELECT,
            Count => s::COUNT,
            Len => s::LEN,
            Min | Max => s::BORDERS,
            Truncate => s::TRUNCATE,
            StorageInfo | Stats => s::STORAGE_INFO,
        }
    }

    fn at(func: Func, line: u32) -> Site {
        site(file(func), line)
    }

    fn of(func: Func, line: u32, err: impl Into<String>) -> CrudError {
        CrudError::new(func.error_class(), at(func, line), err)
    }

    /// `Failed to call <verb> on storage-side: <call>`: how crud's router wraps the error of
    /// its call to a storage (`call` is that error, a CallError) at `func`'s `line`.
    fn storage_side(func: Func, line: u32, call: &CrudError) -> CrudError {
        of(
            func,
            line,
            format!(
                "Failed to call {} on storage-side: {}",
                func.verb(),
                call.tostring()
            ),
        )
    }

    /// `Space "<name>" doesn't exist`, from the router's schema check.
    pub fn no_such_space(func: Func, name: &str) -> CrudError {
        use Func::*;
        let err = super::no_such_space(name);
        if func.is_object() {
            // Objects are flattened against the space's format first.
            return flatten_failed(
                func,
                &format!("Failed to get space format: GetSpaceFormatError: {err}"),
            );
        }
        let line = match func {
            Insert => 93,
            Replace => 92,
            Upsert => 89,
            Update => 114,
            Delete => 99,
            Get => 103,
            InsertMany | ReplaceMany => 193,
            UpsertMany => 190,
            Select | Pairs => {
                return of(func, 62, err).with_stack(s::select_iterator_stack(62));
            }
            Count => 142,
            Len => 68,
            Min | Max => 83,
            // Truncate asks the storages: see `truncate_no_such_space`.
            _ => 72,
        };
        of(func, line, err)
    }

    /// crud.truncate of a missing space: each storage's TruncateError, wrapped by `call.map`
    /// into a CallError and by truncate into its own.
    pub fn truncate_no_such_space(replicaset: &str, name: &str) -> CrudError {
        let storage = format!("TruncateError: {}", super::no_such_space(name));
        truncate_failed(replicaset, &storage)
    }

    /// crud.truncate whose storage answered the error `message` (its text; a box error's
    /// message), wrapped by `call.map` into a CallError and by truncate into its own.
    pub fn truncate_failed(replicaset: &str, message: &str) -> CrudError {
        let call = call_error(
            replicaset,
            message,
            site(s::BASE_POSTPROCESSOR, 71),
            s::map_call_stack(
                site(s::BASE_POSTPROCESSOR, 71),
                Frame::Anonymous(site(s::TRUNCATE, 65), 47),
                &[],
            ),
        );
        of(
            Func::Truncate,
            72,
            format!("Failed to truncate: {}", call.tostring()),
        )
    }

    /// `Failed for <replicaset>: Function returned an error: <message>`, vshard's call
    /// error as crud's `call` module wraps it.
    pub fn call_error(replicaset: &str, message: &str, at: Site, stack: String) -> CrudError {
        CrudError::new(
            "CallError",
            at,
            format!("Failed for {replicaset}: Function returned an error: {message}"),
        )
        .with_stack(stack)
    }

    /// `Failed to flatten object: FlattenError: <message>` (`message` is the FlattenError's
    /// own text, e.g. `Object is specified in bad format: FlattenError: ...`).
    pub fn flatten_failed(func: Func, message: &str) -> CrudError {
        use Func::*;
        let line = match func {
            InsertObject => 254,
            ReplaceObject => 252,
            UpsertObject => 263,
            InsertObjectMany | ReplaceObjectMany => 354,
            _ => 371,
        };
        of(
            func,
            line,
            format!("Failed to flatten object: FlattenError: {message}"),
        )
    }

    /// `Failed to get bucket ID: BucketIDError: <message>` of insert, replace and upsert
    /// (and their object forms, which go the same way once flattened).
    pub fn bucket_id_failed(func: Func, message: &str) -> CrudError {
        use Func::*;
        let err = format!("Failed to get bucket ID: BucketIDError: {message}");
        match func {
            Insert | InsertObject => of(func, 100, err),
            Replace | ReplaceObject => of(func, 99, err),
            Upsert | UpsertObject => of(func, 105, err),
            // get, update, delete return the BucketIDError itself, from
            // `sharding.validate_bucket_id`.
            _ => CrudError::new("BucketIDError", site(s::SHARDING, 125), message),
        }
    }

    /// A `*_many` tuple whose bucket_id is invalid: the iterator that splits the batch by
    /// replicaset refuses the whole batch.
    pub fn split_tuples_failed(func: Func, message: &str) -> CrudError {
        use Func::*;
        let (iter, method_line, object_caller) = match func {
            InsertMany | InsertObjectMany => (site(s::BATCH_INSERT_ITER, 40), 207, (371, 320)),
            ReplaceMany | ReplaceObjectMany => (site(s::BATCH_INSERT_ITER, 40), 207, (371, 320)),
            _ => (site(s::BATCH_UPSERT_ITER, 48), 220, (388, 340)),
        };
        let mut frames = vec![
            Frame::Named(iter, "new"),
            Frame::Named(at(func, method_line), "method"),
        ];
        frames.extend(method_tail(func, object_caller));
        CrudError::new(
            "SplitTuplesError",
            iter,
            format!("Failed to split tuples by replicaset: Failed to get bucket ID: BucketIDError: {message}"),
        )
        .with_stack(s::traceback(&frames))
    }

    /// The frames under a `*_many` router method: a tail call for tuples; for objects,
    /// `schema.wrap_func_reload` called from `<op>_many.objects` at `caller.0`, defined at
    /// `caller.1`.
    fn method_tail(func: Func, caller: (u32, u32)) -> Vec<Frame> {
        if func.is_object() {
            vec![
                Frame::Named(site(s::SHARDING, 217), "func"),
                Frame::Named(site(s::SCHEMA, 101), "wrap_func_reload"),
                Frame::Anonymous(at(func, caller.0), caller.1),
            ]
        } else {
            s::METHOD_TAIL.to_vec()
        }
    }

    /// One `*_many` op that failed on its storage (or was not performed, or rolled back):
    /// a CallError per op, collected by the batch postprocessor.
    pub fn many_op_failed(func: Func, replicaset: &str, message: &str) -> CrudError {
        use Func::*;
        let (method_line, object_caller) = match func {
            InsertMany | InsertObjectMany | ReplaceMany | ReplaceObjectMany => (219, (371, 320)),
            _ => (233, (388, 340)),
        };
        let collect = site(s::BATCH_POSTPROCESSOR, 58);
        let stack = s::map_call_stack(
            collect,
            Frame::Named(at(func, method_line), "method"),
            &method_tail(func, object_caller),
        );
        call_error(replicaset, message, collect, stack)
    }

    /// `Failed to <verb>: <box message>`: the storage answered the op with an error.
    pub fn storage_failed(func: Func, message: &str) -> CrudError {
        use Func::*;
        let line = match func {
            Insert | InsertObject => 135,
            Replace | ReplaceObject => 133,
            Upsert | UpsertObject => 139,
            Update => 195,
            Delete => 173,
            Get => 178,
            _ => 145, // min / max
        };
        of(func, line, format!("Failed to {}: {message}", func.verb()))
    }

    /// `Failed to call <verb> on storage-side: CallError: <call error>` of a point op whose
    /// call could not be made (`call_error_text` is the CallError's own `err`).
    pub fn single_call_failed(func: Func, call_error_text: &str) -> CrudError {
        use Func::*;
        let (line, call_line) = match func {
            Insert | InsertObject => (125, 118),
            Replace | ReplaceObject => (123, 116),
            Upsert | UpsertObject => (129, 122),
            Update => (185, 178),
            Delete => (163, 156),
            _ => (168, 161), // get
        };
        let call = CrudError::new("CallError", site(s::CALL, 243), call_error_text)
            .with_stack(s::single_call_stack(file(func), call_line));
        storage_side(func, line, &call)
    }

    /// The bucket has no replicaset: vshard's NO_ROUTE_TO_BUCKET, as `call.single` prints
    /// it (vshard's error object in JSON).
    pub fn no_route(func: Func, bucket_id: &str) -> CrudError {
        single_call_failed(
            func,
            &format!(
                "Failed to get router replicaset: {{\"bucket_id\":{bucket_id},\"code\":9,\"type\":\"ShardingError\",\"message\":\"Bucket {bucket_id} cannot be found. Is rebalancing in progress?\",\"name\":\"NO_ROUTE_TO_BUCKET\"}}"
            ),
        )
    }

    /// crud.count's storages answered an error.
    pub fn count_storage_failed(replicaset: &str, message: &str) -> CrudError {
        let collect = site(s::BASE_POSTPROCESSOR, 71);
        let call = call_error(
            replicaset,
            message,
            collect,
            s::map_call_stack(
                collect,
                Frame::Named(site(s::COUNT, 249), "method"),
                &s::METHOD_TAIL,
            ),
        );
        storage_side(Func::Count, 254, &call)
    }

    /// An unknown name in `opts.fields`.
    pub fn unknown_field(name: &str) -> CrudError {
        CrudError::new(
            "FilterFieldsError",
            site(s::UTILS, 1075),
            format!("Space format doesn't contain field named \"{name}\""),
        )
    }

    /// `At least one tuple expected` / `At least one object expected`.
    pub fn empty_batch(func: Func) -> CrudError {
        use Func::*;
        match func {
            InsertMany | ReplaceMany => of(func, 289, "At least one tuple expected"),
            UpsertMany => of(func, 308, "At least one tuple expected"),
            InsertObjectMany | ReplaceObjectMany => of(func, 333, "At least one object expected"),
            _ => of(func, 352, "At least one object expected"),
        }
    }

    /// `yield_every should be > 0` (select also refuses `batch_size` below 1).
    pub fn below_one(func: Func, option: &str) -> CrudError {
        let err = format!("{option} should be > 0");
        match (func, option) {
            (Func::Count, _) => of(func, 125, err),
            (_, "batch_size") => of(func, 40, err).with_stack(s::select_iterator_stack(40)),
            _ => of(func, 44, err).with_stack(s::select_iterator_stack(44)),
        }
    }

    /// `Failed to parse conditions: ParseConditionError: <message>` with the
    /// ParseConditionError's stack (it captures one) in the text; `line` is where
    /// `conditions.lua` created it.
    pub fn parse_conditions_failed(func: Func, message: &str, line: u32) -> CrudError {
        let callers = match func {
            Func::Count => s::count_parse_callers(),
            _ => s::select_parse_callers(),
        };
        let err = format!(
            "Failed to parse conditions: ParseConditionError: {message}\n{}",
            s::parse_condition_stack(line, &callers)
        );
        match func {
            Func::Count => of(func, 131, err),
            _ => of(func, 52, err).with_stack(s::select_iterator_stack(52)),
        }
    }

    /// No TREE index to scan (a HASH primary key and no TREE condition).
    pub fn no_tree_index(func: Func) -> CrudError {
        let (line, verb) = match func {
            Func::Count => (164, "count"),
            _ => (89, "select"),
        };
        let err = format!(
            "Failed to plan {verb}: IndexTypeError: An index that matches specified conditions was not found: At least one of condition indexes or primary index should be of type TREE"
        );
        match func {
            Func::Count => of(func, line, err),
            _ => of(func, line, err).with_stack(s::select_iterator_stack(line)),
        }
    }

    /// `Negative first should be specified only with after option`.
    pub fn negative_first() -> CrudError {
        of(
            Func::Select,
            383,
            "Negative first should be specified only with after option",
        )
        .with_stack(s::select_call_stack(383))
    }

    /// What crud.select makes of an error raised out of it (a storage's box error, or a
    /// `checks` message with its positions): a SelectError at `sharding.wrap_select_method`.
    pub fn select_raised(message: &str) -> CrudError {
        CrudError::new("SelectError", s::SELECT_RERAISE, message)
            .with_stack(s::select_reraise_stack())
    }

    /// min / max on an index the space does not have (`text` names it).
    pub fn border_failed(func: Func, text: String) -> CrudError {
        of(func, 95, text)
    }

    /// `Unknown call mode: <mode>` of `call.single` (get), wrapped by the op.
    pub fn unknown_call_mode(func: Func, mode: &str) -> CrudError {
        let (line, call_line) = (168, 161);
        let mut frames = vec![
            Frame::Named(site(s::CALL, 33), "get_vshard_call_name"),
            Frame::Named(site(s::CALL, 236), "single"),
            Frame::Named(at(func, call_line), "method"),
        ];
        frames.extend_from_slice(&s::METHOD_TAIL);
        let call = CrudError::new(
            "CallError",
            site(s::CALL, 33),
            format!("Unknown call mode: {mode}"),
        )
        .with_stack(s::traceback(&frames));
        storage_side(func, line, &call)
    }
}
