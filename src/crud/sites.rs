//! Where tarantool/crud 1.7.5 (with vshard 0.1.42, checks 3.4, errors 2.2) creates the
//! errors tarn answers with: the `file` and `line` of each error object, the `stack` of the
//! classes that capture one, and the `<file>:<line>: ` prefix of the Lua errors it raises.
//! `docs/crud-reference.md` names the crud source line of every site and how each value is
//! derived; the values here were checked against the real router on Tarantool 2.6.
//!
//! Knows nothing of storage or the wire: only crud's Lua layout and the way Lua prints it.
//!
//! * A Lua chunk's name is its path; crud installed with `tt rocks install` in the
//!   Tarantool image's working directory lives under [`ROOT`]. Lua shortens a path longer
//!   than 59 bytes to `...` and its last 56 ([`short_src`]), in `file` and in stacks alike.
//! * A stack is `debug.traceback`'s text: `stack traceback:` and one frame per line, each
//!   after a tab. The outermost frame is Tarantool's C function that ran the CALL; its
//!   address ([`CALL_FRAME`]) is the one the reference Tarantool 2.6.0 build printed.

use std::fmt::Write;

/// Where crud and its dependencies are installed (`.rocks/share/tarantool` of the working
/// directory `/opt/tarantool`).
pub const ROOT: &str = "/opt/tarantool/.rocks/share/tarantool/";

/// The outermost frame of every stack: the C function that runs a CALL's Lua function.
pub const CALL_FRAME: &str = "[C]: at 0x004cd7f0";

/// Lua's `short_src` of the chunk at `ROOT` + `file`: at most 59 bytes.
pub fn short_src(file: &str) -> String {
    const ID_SIZE: usize = 60;
    let full = format!("{ROOT}{file}");
    if full.len() < ID_SIZE {
        return full;
    }
    // The paths are ASCII: any byte offset is a char boundary.
    format!("...{}", &full[full.len() - (ID_SIZE - 4)..])
}

/// A place in crud's Lua: a file (relative to [`ROOT`]) and a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    pub file: &'static str,
    pub line: u32,
}

pub const fn site(file: &'static str, line: u32) -> Site {
    Site { file, line }
}

/// One line of a traceback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// `<file>:<line>: in function '<name>'`
    Named(Site, &'static str),
    /// `<file>:<line>: in function <<file>:<defined>>` (a function Lua knows no name of).
    Anonymous(Site, u32),
    /// `[C]: in function '<name>'`
    C(&'static str),
}

/// `stack traceback:` and the frames, innermost first, then [`CALL_FRAME`].
pub fn traceback(frames: &[Frame]) -> String {
    let mut out = String::from("stack traceback:");
    for frame in frames {
        out.push_str("\n\t");
        match *frame {
            Frame::Named(at, name) => {
                let _ = write!(
                    out,
                    "{}:{}: in function '{name}'",
                    short_src(at.file),
                    at.line
                );
            }
            Frame::Anonymous(at, defined) => {
                let src = short_src(at.file);
                let _ = write!(out, "{src}:{}: in function <{src}:{defined}>", at.line);
            }
            Frame::C(name) => {
                let _ = write!(out, "[C]: in function '{name}'");
            }
        }
    }
    out.push_str("\n\t");
    out.push_str(CALL_FRAME);
    out
}

/// `<short_src>:<line>: `, the position Lua's `error(message, level)` puts first.
pub fn position(at: Site) -> String {
    format!("{}:{}: ", short_src(at.file), at.line)
}

// The files.
pub const INSERT: &str = "crud/insert.lua";
pub const INSERT_MANY: &str = "crud/insert_many.lua";
pub const REPLACE: &str = "crud/replace.lua";
pub const REPLACE_MANY: &str = "crud/replace_many.lua";
pub const UPSERT: &str = "crud/upsert.lua";
pub const UPSERT_MANY: &str = "crud/upsert_many.lua";
pub const UPDATE: &str = "crud/update.lua";
pub const DELETE: &str = "crud/delete.lua";
pub const GET: &str = "crud/get.lua";
pub const SELECT: &str = "crud/select/compat/select.lua";
pub const COUNT: &str = "crud/count.lua";
pub const LEN: &str = "crud/len.lua";
pub const BORDERS: &str = "crud/borders.lua";
pub const TRUNCATE: &str = "crud/truncate.lua";
pub const STORAGE_INFO: &str = "crud/storage_info.lua";
pub const UTILS: &str = "crud/common/utils.lua";
pub const CALL: &str = "crud/common/call.lua";
pub const SCHEMA: &str = "crud/common/schema.lua";
pub const SHARDING: &str = "crud/common/sharding/init.lua";
pub const CONDITIONS: &str = "crud/compare/conditions.lua";
pub const BASE_POSTPROCESSOR: &str = "crud/common/map_call_cases/base_postprocessor.lua";
pub const BATCH_POSTPROCESSOR: &str = "crud/common/map_call_cases/batch_postprocessor.lua";
pub const BATCH_INSERT_ITER: &str = "crud/common/map_call_cases/batch_insert_iter.lua";
pub const BATCH_UPSERT_ITER: &str = "crud/common/map_call_cases/batch_upsert_iter.lua";
pub const ERRORS: &str = "errors.lua";
pub const VSHARD_ROUTER: &str = "vshard/router/init.lua";

/// The frames under a router method that `schema.wrap_func_reload` called through
/// `sharding.wrap_method` from the public function's tail call (point ops, `*_many` of
/// tuples, count).
pub const METHOD_TAIL: [Frame; 2] = [
    Frame::Named(site(SHARDING, 217), "func"),
    Frame::Anonymous(site(SCHEMA, 101), 96),
];

/// The frames under `select_module_call_xc` (`select.lua:335`), which `crud.select` runs
/// through `SelectError:pcall(sharding.wrap_select_method, ...)`.
pub const SELECT_CALL_TAIL: [Frame; 4] = [
    Frame::C("pcall"),
    Frame::Anonymous(site(SHARDING, 242), 237),
    Frame::C("xpcall"),
    Frame::Anonymous(site(ERRORS, 145), 139),
];

/// The stack of a SelectError created in `build_select_iterator` at `line`, under
/// `schema.wrap_func_reload` (`select.lua:408`).
pub fn select_iterator_stack(line: u32) -> String {
    let mut frames = vec![
        Frame::Named(site(SELECT, line), "func"),
        Frame::Named(site(SCHEMA, 101), "wrap_func_reload"),
        Frame::Anonymous(site(SELECT, 408), 335),
    ];
    frames.extend_from_slice(&SELECT_CALL_TAIL);
    traceback(&frames)
}

/// The stack of a SelectError created in `select_module_call_xc` itself at `line`.
pub fn select_call_stack(line: u32) -> String {
    let mut frames = vec![Frame::Anonymous(site(SELECT, line), 335)];
    frames.extend_from_slice(&SELECT_CALL_TAIL);
    traceback(&frames)
}

/// Where `sharding.wrap_select_method` raises again what the select raised: the
/// SelectError that `SelectError:pcall` makes of it is created here.
pub const SELECT_RERAISE: Site = site(SHARDING, 252);

/// The stack of a SelectError made of an error raised out of the select.
pub fn select_reraise_stack() -> String {
    traceback(&[
        Frame::Anonymous(SELECT_RERAISE, 237),
        SELECT_CALL_TAIL[2],
        SELECT_CALL_TAIL[3],
    ])
}

/// Where `checks` finds `select_module_call_xc`'s arguments wrong.
pub const SELECT_CHECKS: Site = site(SELECT, 336);

/// The stack of a ParseConditionError raised at `conditions.lua:<line>` and caught by the
/// caller at `caller` (a frame of crud.select or crud.count).
pub fn parse_condition_stack(line: u32, callers: &[Frame]) -> String {
    let mut frames = vec![Frame::Named(site(CONDITIONS, line), "parse")];
    frames.extend_from_slice(callers);
    traceback(&frames)
}

/// The callers of `compare_conditions.parse` in crud.select.
pub fn select_parse_callers() -> Vec<Frame> {
    let mut frames = vec![
        Frame::Named(site(SELECT, 50), "func"),
        Frame::Named(site(SCHEMA, 101), "wrap_func_reload"),
        Frame::Anonymous(site(SELECT, 408), 335),
    ];
    frames.extend_from_slice(&SELECT_CALL_TAIL);
    frames
}

/// The callers of `compare_conditions.parse` in crud.count.
pub fn count_parse_callers() -> Vec<Frame> {
    let mut frames = vec![Frame::Named(site(COUNT, 129), "method")];
    frames.extend_from_slice(&METHOD_TAIL);
    frames
}

/// The stack of the CallError that `call.map` builds for a replicaset's error, collected
/// by the postprocessor at `collect` and returned to `caller`.
pub fn map_call_stack(collect: Site, caller: Frame, under: &[Frame]) -> String {
    let mut frames = vec![
        Frame::Named(collect, "collect"),
        Frame::Named(site(CALL, 218), "map"),
        caller,
    ];
    frames.extend_from_slice(under);
    traceback(&frames)
}

/// The stack of the CallError `call.single` returns when the bucket has no replicaset,
/// under the router method that called it at `caller_line` of `file`.
pub fn single_call_stack(file: &'static str, caller_line: u32) -> String {
    let mut frames = vec![
        Frame::Named(site(CALL, 243), "single"),
        Frame::Named(site(file, caller_line), "method"),
    ];
    frames.extend_from_slice(&METHOD_TAIL);
    traceback(&frames)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_src_keeps_59_bytes_and_shortens_longer_paths() {
        // 58 and 60 bytes in full: Lua keeps the first, shortens the second to 59.
        assert_eq!(
            short_src(CALL),
            "/opt/tarantool/.rocks/share/tarantool/crud/common/call.lua"
        );
        assert_eq!(
            short_src(SCHEMA),
            ".../tarantool/.rocks/share/tarantool/crud/common/schema.lua"
        );
        assert_eq!(
            short_src(BATCH_POSTPROCESSOR),
            "...ntool/crud/common/map_call_cases/batch_postprocessor.lua"
        );
    }

    #[test]
    fn a_traceback_ends_in_the_call_frame() {
        assert_eq!(
            select_reraise_stack(),
            "stack traceback:\n\t\
             ...ool/.rocks/share/tarantool/crud/common/sharding/init.lua:252: in function \
             <...ool/.rocks/share/tarantool/crud/common/sharding/init.lua:237>\n\t\
             [C]: in function 'xpcall'\n\t\
             /opt/tarantool/.rocks/share/tarantool/errors.lua:145: in function \
             </opt/tarantool/.rocks/share/tarantool/errors.lua:139>\n\t\
             [C]: at 0x004cd7f0"
        );
    }
}
