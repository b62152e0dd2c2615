//! The update tree: ops whose paths go inside fields, applied as Tarantool 2.11's
//! `xrow_update_{array,map,bar,route}.c` apply them, so that the new tuple comes out
//! byte-identical.
//!
//! The shape of the tree decides the bytes, not only the values: a lone op inside a field
//! is a *bar* that patches the field in place (a new map key goes right after the map
//! header); a second op meeting it splits it into a *route* (the common path prefix) and a
//! map or array node, and a map node writes its changed keys first, newest first, then the
//! untouched pairs. Errors name the field by the whole path as sent (`'[2].a'`), and an op
//! fails before it changes anything, except that finding a key in a map node moves that
//! key to the front (as in Tarantool, visible when UPSERT skips the op).
//!
//! Where 2.6 and 2.11 differ the code follows 2.11 (2.6 crashes on a path op after another
//! op on the same field, gh-7705 / gh-8216), except at the top level, where `=` past the
//! end and `#` past the end are errors as in 2.6 (tarn's flat engine does the same).
//!
//! Only [`super::UpdateOps::apply`] uses it, and only when some op goes inside a field;
//! plain field ops never reach this module.

use super::apply::{compute, write_content, Content};
use super::path::{Lexer, Token};
use super::{OpKind, UpdateOp};
use crate::msgpack::{
    read_value, take_value, write_array_len, write_f64, write_map_len, write_str, Value,
};
use crate::storage::error::StorageError;

type Result<T> = std::result::Result<T, StorageError>;

fn corrupt<T>(_: T) -> StorageError {
    StorageError::InvalidMsgpack("tuple")
}

/// One node of the tree; every variant remembers the bytes it stands for.
enum Node<'x> {
    /// Not changed.
    Nop(&'x [u8]),
    /// Replaced by `=` or computed by a scalar op.
    Scalar {
        data: &'x [u8],
        content: Content<'x>,
    },
    Array(Box<ArrayNode<'x>>),
    Map(Box<MapNode<'x>>),
    Bar(Box<Bar<'x>>),
    Route(Box<Route<'x>>),
}

struct ArrayNode<'x> {
    /// The whole array, header included.
    data: &'x [u8],
    items: Vec<Node<'x>>,
}

struct MapNode<'x> {
    data: &'x [u8],
    /// Pairs in the new map.
    size: u32,
    /// Tarantool's item list, its head *last*: new items go to the head.
    items: Vec<MapItem<'x>>,
}

struct MapItem<'x> {
    /// `None`: the item holds only unchanged pairs (its `tail`).
    key: Option<&'x [u8]>,
    field: Node<'x>,
    /// Unchanged pairs written after every changed one.
    tail: &'x [u8],
}

/// A single op at the end of a path inside `data`, not crossed by any other op.
struct Bar<'x> {
    data: &'x [u8],
    /// The path from `data` to the point, as the op spelled it (may be empty after a split).
    path: &'x [u8],
    /// Offset in `data` of the container holding the point.
    parent: usize,
    /// Offset and size in `data` of what the op replaces or deletes, or where `!` inserts.
    point: usize,
    point_size: usize,
    kind: BarKind<'x>,
}

#[derive(Clone, Copy)]
enum BarKind<'x> {
    /// `!`, or `=` on a missing key or one past an array's end.
    Insert {
        value: &'x [u8],
        new_key: Option<&'x [u8]>,
    },
    /// `#` of `count` array elements (already clipped) or one map pair (key included).
    Delete {
        count: u32,
    },
    Replace(Content<'x>),
}

/// The common path of several ops, leading to the node where they part.
struct Route<'x> {
    data: &'x [u8],
    path: &'x [u8],
    next: Node<'x>,
}

impl<'x> Node<'x> {
    fn data(&self) -> &'x [u8] {
        match self {
            Node::Nop(data) => data,
            Node::Scalar { data, .. } => data,
            Node::Array(array) => array.data,
            Node::Map(map) => map.data,
            Node::Bar(bar) => bar.data,
            Node::Route(route) => route.data,
        }
    }

    /// Makes the node stand for `data`, a part of its old bytes (a subtree moved under a
    /// new parent); a bar's offsets move with it.
    fn rebase(&mut self, data: &'x [u8]) {
        match self {
            Node::Nop(old) => *old = data,
            Node::Scalar { data: old, .. } => *old = data,
            Node::Array(array) => array.data = data,
            Node::Map(map) => map.data = data,
            Node::Route(route) => route.data = data,
            Node::Bar(bar) => {
                let delta = (data.as_ptr() as usize).saturating_sub(bar.data.as_ptr() as usize);
                // A bar split down to an empty path keeps a parent outside its new bytes;
                // only its point is used then.
                bar.parent = bar.parent.saturating_sub(delta);
                bar.point = bar.point.saturating_sub(delta);
                bar.data = data;
            }
        }
    }
}

/// One op on its way down the tree: Tarantool's `xrow_update_op` lexer and token state.
struct Walk<'o, 'x> {
    op: &'o UpdateOp<'x>,
    lexer: Lexer<'x>,
    /// The step at the current level.
    token: Token<'x>,
    /// The current level used `token`; the next level must read a new one.
    consumed: bool,
}

impl<'o, 'x> Walk<'o, 'x> {
    fn new(op: &'o UpdateOp<'x>) -> Self {
        let lexer = match op.target.path {
            Some(path) if op.target.nested_at != 0 => {
                Lexer::resumed(path, op.target.nested_at as usize)
            }
            Some(path) => Lexer::resumed(path, path.len()),
            None => Lexer::new(&[]),
        };
        Walk {
            op,
            lexer,
            token: Token::Num(op.target.field_no),
            consumed: false,
        }
    }

    fn is_term(&self) -> bool {
        self.lexer.is_eof()
    }

    fn field_no(&self) -> i32 {
        match self.token {
            Token::Num(n) => n,
            _ => 0,
        }
    }

    /// `xrow_update_op_field_str`.
    fn label(&self) -> Box<str> {
        match self.op.target.path {
            Some(path) => super::quoted(path),
            None => {
                let n = self.field_no();
                if n >= 0 {
                    (i64::from(n) + 1).to_string().into()
                } else {
                    n.to_string().into()
                }
            }
        }
    }

    fn no_such_field(&self) -> StorageError {
        match self.op.target.path {
            Some(path) => StorageError::NoSuchFieldName(super::quoted(path)),
            None => {
                let n = i64::from(self.field_no());
                StorageError::NoSuchFieldNo(if n >= 0 { n + 1 } else { n })
            }
        }
    }

    fn error(&self, reason: &str) -> StorageError {
        StorageError::UpdateField {
            field: self.label(),
            reason: reason.into(),
        }
    }

    fn bad_json(&self, position: u32) -> StorageError {
        self.error(&format!("invalid JSON in position {position}"))
    }

    fn double(&self) -> StorageError {
        self.error("double update of the same field")
    }

    /// `xrow_update_op_next_token`.
    fn next_token(&mut self) -> Result<()> {
        match self.lexer.next_token() {
            Err(position) => Err(self.bad_json(position)),
            Ok(Token::End) => Err(self.no_such_field()),
            Ok(token) => {
                self.token = token;
                self.consumed = false;
                Ok(())
            }
        }
    }

    /// `xrow_update_op_adjust_field_no`: the position below `count`, negative numbers
    /// counted from the end.
    fn adjust(&mut self, count: usize) -> Result<usize> {
        let n = i64::from(self.field_no());
        let count = count as i64;
        let position = if n >= 0 { n } else { n + count };
        if n >= count || position < 0 {
            return Err(self.no_such_field());
        }
        // Below `count`, which came from a Vec length; fits i32 because `n` did.
        self.token = Token::Num(position as i32);
        Ok(position as usize)
    }
}

pub(super) fn apply(
    ops: &[UpdateOp<'_>],
    tuple: &[u8],
    out: &mut Vec<u8>,
    double_fields: &[bool],
    mut on_skip: Option<&mut dyn FnMut(&StorageError)>,
) -> Result<()> {
    let mut root = match array_node(tuple, 0)? {
        Some(root) => root,
        None => return Err(StorageError::TupleNotArray),
    };
    for op in ops {
        let mut walk = Walk::new(op);
        if let Err(error) = do_array(&mut walk, &mut root) {
            match on_skip.as_mut() {
                Some(on_skip) if !matches!(error, StorageError::InvalidMsgpack(_)) => {
                    on_skip(&error)
                }
                _ => return Err(error),
            }
        }
    }
    let count = u32::try_from(root.items.len())
        .map_err(|_| StorageError::IllegalParams("too many fields in tuple".into()))?;
    write_array_len(out, count);
    for (position, item) in root.items.iter().enumerate() {
        match item {
            // A float result in a field the format types `double` goes out as a float64.
            Node::Scalar {
                content: Content::F32(value),
                ..
            } if double_fields.get(position) == Some(&true) => write_f64(out, f64::from(*value)),
            item => store(item, out)?,
        }
    }
    Ok(())
}

/// The array at `data[at..]` as an array node, or `None` if it is no array.
fn array_node(data: &[u8], at: usize) -> Result<Option<ArrayNode<'_>>> {
    let start = data
        .get(at..)
        .ok_or(StorageError::InvalidMsgpack("tuple"))?;
    let mut cursor = start;
    let Value::Array(count) = read_value(&mut cursor).map_err(corrupt)? else {
        return Ok(None);
    };
    let mut items = Vec::with_capacity(count.min(1024) as usize);
    for _ in 0..count {
        items.push(Node::Nop(take_value(&mut cursor).map_err(corrupt)?));
    }
    let len = start.len() - cursor.len();
    Ok(Some(ArrayNode {
        data: &start[..len],
        items,
    }))
}

/// The whole value at `data[at..]`.
fn value_at(data: &[u8], at: usize) -> Result<&[u8]> {
    let mut cursor = data
        .get(at..)
        .ok_or(StorageError::InvalidMsgpack("tuple"))?;
    take_value(&mut cursor).map_err(corrupt)
}

/// `tuple_field_go_to_index`: in an array the element, in a map the value of the integer
/// key `index + 1`. Returns the offsets of the value and of its key (the value's own for
/// an array).
fn go_to_index(data: &[u8], at: usize, index: i32) -> Result<Option<(usize, usize)>> {
    let start = data
        .get(at..)
        .ok_or(StorageError::InvalidMsgpack("tuple"))?;
    let mut cursor = start;
    let offset = |cursor: &[u8]| at + start.len() - cursor.len();
    let Ok(index) = u64::try_from(index) else {
        return Ok(None);
    };
    match read_value(&mut cursor).map_err(corrupt)? {
        Value::Array(count) => {
            if index >= u64::from(count) {
                return Ok(None);
            }
            for _ in 0..index {
                take_value(&mut cursor).map_err(corrupt)?;
            }
            let position = offset(cursor);
            Ok(Some((position, position)))
        }
        Value::Map(count) => {
            let key_wanted = index + 1;
            for _ in 0..count {
                let key_at = offset(cursor);
                let matched = match read_value(&mut cursor).map_err(corrupt)? {
                    Value::Uint(key) => key == key_wanted,
                    Value::Int(key) => u64::try_from(key) == Ok(key_wanted),
                    Value::Array(_) | Value::Map(_) => {
                        // read_value read only the header of a container key.
                        cursor = &data[key_at..];
                        take_value(&mut cursor).map_err(corrupt)?;
                        false
                    }
                    _ => false,
                };
                if matched {
                    return Ok(Some((offset(cursor), key_at)));
                }
                take_value(&mut cursor).map_err(corrupt)?;
            }
            Ok(None)
        }
        _ => Ok(None),
    }
}

/// `tuple_field_go_to_key`: the value of the string key `key` in a map.
fn go_to_key(data: &[u8], at: usize, key: &[u8]) -> Result<Option<(usize, usize)>> {
    let start = data
        .get(at..)
        .ok_or(StorageError::InvalidMsgpack("tuple"))?;
    let mut cursor = start;
    let offset = |cursor: &[u8]| at + start.len() - cursor.len();
    let Value::Map(count) = read_value(&mut cursor).map_err(corrupt)? else {
        return Ok(None);
    };
    for _ in 0..count {
        let key_at = offset(cursor);
        let key_bytes = take_value(&mut cursor).map_err(corrupt)?;
        let mut key_cursor = key_bytes;
        if let Ok(Value::Str(name)) = read_value(&mut key_cursor) {
            if name == key {
                return Ok(Some((offset(cursor), key_at)));
            }
        }
        take_value(&mut cursor).map_err(corrupt)?;
    }
    Ok(None)
}

fn go_to(data: &[u8], at: usize, token: &Token<'_>) -> Result<Option<(usize, usize)>> {
    match *token {
        Token::Num(index) => go_to_index(data, at, index),
        Token::Str(key) => go_to_key(data, at, key),
        Token::End | Token::Any => Ok(None),
    }
}

/// Dispatches `walk` to `node` (Tarantool's `xrow_update_op_do_field_*`).
fn do_field<'x>(walk: &mut Walk<'_, 'x>, node: &mut Node<'x>) -> Result<()> {
    match node {
        Node::Scalar { .. } => Err(walk.double()),
        Node::Array(array) => do_array(walk, array),
        Node::Map(map) => do_map(walk, map),
        Node::Nop(data) => {
            let bar = do_nop(walk, data)?;
            *node = Node::Bar(Box::new(bar));
            Ok(())
        }
        Node::Bar(_) | Node::Route(_) => {
            let next = route_next(walk, node)?;
            do_field(walk, next)
        }
    }
}

fn do_array<'x>(walk: &mut Walk<'_, 'x>, array: &mut ArrayNode<'x>) -> Result<()> {
    if walk.consumed {
        walk.next_token()?;
    }
    if !matches!(walk.token, Token::Num(_)) {
        return Err(walk.error("can't update an array by a non-numeric index"));
    }
    let len = array.items.len();
    match walk.op.kind {
        OpKind::Insert(value) => array_insert(walk, array, value),
        OpKind::Set(value) => {
            // `=` one past the end inserts (2.6 rule: only exactly one past).
            if i64::from(walk.field_no()) == len as i64 {
                return array_insert(walk, array, value);
            }
            let position = walk.adjust(len)?;
            if !walk.is_term() {
                walk.consumed = true;
                return do_field(walk, &mut array.items[position]);
            }
            let data = array.items[position].data();
            array.items[position] = Node::Scalar {
                data,
                content: Content::Raw(value),
            };
            Ok(())
        }
        OpKind::Delete(count) => {
            let position = walk.adjust(len)?;
            if !walk.is_term() {
                walk.consumed = true;
                return do_field(walk, &mut array.items[position]);
            }
            let count = (count as usize).min(len - position);
            array.items.drain(position..position + count);
            Ok(())
        }
        OpKind::Scalar(scalar) => {
            let position = walk.adjust(len)?;
            if !walk.is_term() {
                walk.consumed = true;
                return do_field(walk, &mut array.items[position]);
            }
            let Node::Nop(data) = array.items[position] else {
                return Err(walk.double());
            };
            let content = compute(walk.op.opcode, &walk.op.target, scalar, data, position)?;
            array.items[position] = Node::Scalar { data, content };
            Ok(())
        }
    }
}

fn array_insert<'x>(
    walk: &mut Walk<'_, 'x>,
    array: &mut ArrayNode<'x>,
    value: &'x [u8],
) -> Result<()> {
    let len = array.items.len();
    if !walk.is_term() {
        let position = walk.adjust(len)?;
        walk.consumed = true;
        return do_field(walk, &mut array.items[position]);
    }
    let position = walk.adjust(len + 1)?;
    array.items.insert(position, Node::Nop(value));
    Ok(())
}

/// `xrow_update_map_extract_opt_item`: the item of the walk's key, found among the
/// changed keys or split off an unchanged tail (then it becomes the list head, or takes
/// over a key-less item it starts).
fn map_find<'x>(walk: &mut Walk<'_, 'x>, map: &mut MapNode<'x>) -> Result<Option<usize>> {
    if walk.consumed {
        walk.next_token()?;
        if !matches!(walk.token, Token::Str(_)) {
            return Err(walk.error("can't update a map by not a string key"));
        }
    }
    let Token::Str(key) = walk.token else {
        return Err(walk.error("can't update a map by not a string key"));
    };
    if let Some(index) = (0..map.items.len())
        .rev()
        .find(|&index| map.items[index].key == Some(key))
    {
        return Ok(Some(index));
    }
    for index in (0..map.items.len()).rev() {
        let tail = map.items[index].tail;
        let mut cursor = tail;
        while !cursor.is_empty() {
            let key_at = tail.len() - cursor.len();
            let key_bytes = take_value(&mut cursor).map_err(corrupt)?;
            let value = take_value(&mut cursor).map_err(corrupt)?;
            let mut key_cursor = key_bytes;
            if !matches!(read_value(&mut key_cursor), Ok(Value::Str(name)) if name == key) {
                continue;
            }
            let rest = cursor;
            let item = &mut map.items[index];
            if key_at == 0 && item.key.is_none() {
                item.key = Some(key);
                item.field = Node::Nop(value);
                item.tail = rest;
                return Ok(Some(index));
            }
            item.tail = &tail[..key_at];
            map.items.push(MapItem {
                key: Some(key),
                field: Node::Nop(value),
                tail: rest,
            });
            return Ok(Some(map.items.len() - 1));
        }
    }
    Ok(None)
}

fn do_map<'x>(walk: &mut Walk<'_, 'x>, map: &mut MapNode<'x>) -> Result<()> {
    let found = map_find(walk, map)?;
    let Token::Str(key) = walk.token else {
        return Err(walk.error("can't update a map by not a string key"));
    };
    if !walk.is_term() {
        let Some(index) = found else {
            return Err(walk.no_such_field());
        };
        walk.consumed = true;
        return do_field(walk, &mut map.items[index].field);
    }
    match walk.op.kind {
        OpKind::Insert(value) | OpKind::Set(value) => match found {
            Some(_) if matches!(walk.op.kind, OpKind::Insert(_)) => {
                Err(walk.error("the key exists already"))
            }
            Some(index) => {
                let data = map.items[index].field.data();
                map.items[index].field = Node::Scalar {
                    data,
                    content: Content::Raw(value),
                };
                Ok(())
            }
            None => {
                map.size += 1;
                map.items.push(MapItem {
                    key: Some(key),
                    field: Node::Nop(value),
                    tail: &[],
                });
                Ok(())
            }
        },
        OpKind::Delete(count) => {
            if count != 1 {
                return Err(walk.error("can delete only 1 field from a map in a row"));
            }
            if let Some(index) = found {
                let item = &mut map.items[index];
                item.key = None;
                item.field = Node::Nop(&[]);
                map.size -= 1;
            }
            Ok(())
        }
        OpKind::Scalar(scalar) => {
            let Some(index) = found else {
                return Err(walk.no_such_field());
            };
            let Node::Nop(data) = map.items[index].field else {
                return Err(walk.double());
            };
            let content = compute(walk.op.opcode, &walk.op.target, scalar, data, 0)?;
            map.items[index].field = Node::Scalar { data, content };
            Ok(())
        }
    }
}

/// Where a bar's path ends in its field.
struct Located<'x> {
    parent: usize,
    point: usize,
    point_size: usize,
    /// The last step's array index.
    index: i32,
    /// The offset of the last step's map key.
    key_at: usize,
    /// `None` when found; else the step that was not (only the last may be missing).
    missing: Option<Token<'x>>,
}

/// `xrow_update_bar_locate` (`optional` false) / `xrow_update_bar_locate_opt`.
fn locate<'x>(walk: &mut Walk<'_, 'x>, data: &'x [u8], optional: bool) -> Result<Located<'x>> {
    let mut located = Located {
        parent: 0,
        point: 0,
        point_size: 0,
        index: 0,
        key_at: 0,
        missing: None,
    };
    let mut position = 0;
    loop {
        let token = walk
            .lexer
            .next_token()
            .map_err(|position| walk.bad_json(position))?;
        match token {
            Token::End => break,
            Token::Num(index) => located.index = index,
            Token::Str(_) => {}
            Token::Any => return Err(walk.bad_json(walk.lexer.symbols.saturating_sub(1))),
        }
        located.parent = position;
        match go_to(data, position, &token)? {
            Some((value_at, key_at)) => {
                position = value_at;
                located.key_at = key_at;
            }
            None if !optional => return Err(walk.no_such_field()),
            None => {
                located.missing = Some(token);
                break;
            }
        }
    }
    let Some(missing) = located.missing else {
        located.point = position;
        located.point_size = value_at(data, position)?.len();
        return Ok(located);
    };
    match walk.lexer.next_token() {
        Err(position) => return Err(walk.bad_json(position)),
        Ok(Token::End) => {}
        Ok(_) => return Err(walk.no_such_field()),
    }
    let mut header = &data[located.parent..];
    let parent = read_value(&mut header).map_err(corrupt)?;
    match missing {
        Token::Num(index) => {
            let Value::Array(size) = parent else {
                return Err(walk.error("can not access by index a non-array field"));
            };
            if i64::from(index) > i64::from(size) {
                return Err(walk.no_such_field());
            }
            // One past the end: an append at the end of the parent array.
            located.point = located.parent + value_at(data, located.parent)?.len();
        }
        _ => {
            if !matches!(parent, Value::Map(_)) {
                return Err(walk.error("can not access by key a non-map field"));
            }
        }
    }
    Ok(located)
}

/// A not-yet-changed field receiving an op inside it becomes a bar (`xrow_update_op_do_nop_*`).
fn do_nop<'x>(walk: &mut Walk<'_, 'x>, data: &'x [u8]) -> Result<Bar<'x>> {
    let path = walk.lexer.rest();
    let (located, kind) = match walk.op.kind {
        OpKind::Insert(value) | OpKind::Set(value) => {
            let located = locate(walk, data, true)?;
            let parent_is_map = matches!(data.get(located.parent), Some(0x80..=0x8f | 0xde | 0xdf));
            let kind = match located.missing {
                None if matches!(walk.op.kind, OpKind::Insert(_)) => {
                    if parent_is_map {
                        return Err(walk.error("the key exists already"));
                    }
                    BarKind::Insert {
                        value,
                        new_key: None,
                    }
                }
                None => BarKind::Replace(Content::Raw(value)),
                Some(Token::Str(key)) => BarKind::Insert {
                    value,
                    new_key: Some(key),
                },
                Some(_) => BarKind::Insert {
                    value,
                    new_key: None,
                },
            };
            (located, kind)
        }
        OpKind::Delete(count) => {
            let mut located = locate(walk, data, false)?;
            let mut header = &data[located.parent..];
            let kind = match read_value(&mut header).map_err(corrupt)? {
                Value::Array(size) => {
                    let left = u64::from(size).saturating_sub(located.index.max(0) as u64);
                    let count = u64::from(count).min(left) as u32;
                    let mut end = located.point + located.point_size;
                    for _ in 1..count {
                        end += value_at(data, end)?.len();
                    }
                    located.point_size = end - located.point;
                    BarKind::Delete { count }
                }
                _ => {
                    if count != 1 {
                        return Err(walk.error("can delete only 1 field from a map in a row"));
                    }
                    // Tarantool steps back by the size a string key of this length would
                    // take; tarn uses where the key really starts (the same bytes for keys
                    // msgpack encoders write).
                    let end = located.point + located.point_size;
                    located.point = located.key_at;
                    located.point_size = end - located.key_at;
                    BarKind::Delete { count: 1 }
                }
            };
            (located, kind)
        }
        OpKind::Scalar(scalar) => {
            let located = locate(walk, data, false)?;
            let old = &data[located.point..located.point + located.point_size];
            let content = compute(walk.op.opcode, &walk.op.target, scalar, old, 0)?;
            (located, BarKind::Replace(content))
        }
    };
    Ok(Bar {
        data,
        path,
        parent: located.parent,
        point: located.point,
        point_size: located.point_size,
        kind,
    })
}

/// `xrow_update_route_next`: follows a route whose whole path begins the walk's rest (a
/// byte comparison, as Tarantool's; the lexer's symbol count is not advanced, as in
/// Tarantool), or branches.
fn route_next<'n, 'x>(walk: &mut Walk<'_, 'x>, node: &'n mut Node<'x>) -> Result<&'n mut Node<'x>> {
    let follow = match node {
        Node::Route(route) => walk.lexer.rest().starts_with(route.path),
        _ => false,
    };
    if follow {
        if let Node::Route(route) = node {
            walk.lexer.offset += route.path.len();
            return Ok(&mut route.next);
        }
    }
    branch(walk, node)
}

/// `xrow_update_route_branch`: splits a bar or route where the walk's path leaves it; the
/// common prefix stays a route (or nothing, when they part at once), the old subtree and
/// the new op become children of a map or array node. Returns that node.
fn branch<'n, 'x>(walk: &mut Walk<'_, 'x>, node: &'n mut Node<'x>) -> Result<&'n mut Node<'x>> {
    let (data, old_path) = match node {
        Node::Bar(bar) => (bar.data, bar.path),
        Node::Route(route) => (route.data, route.path),
        _ => return Err(StorageError::InvalidMsgpack("tuple")),
    };
    let mut old = Lexer::new(old_path);
    let mut parent = 0;
    let (common_len, old_token, new_token) = loop {
        let common_len = old.offset;
        // The old path was lexed when its op ran.
        let old_token = old.next_token().map_err(corrupt)?;
        let new_token = walk
            .lexer
            .next_token()
            .map_err(|position| walk.bad_json(position))?;
        if old_token == Token::End {
            return Err(walk.double());
        }
        if old_token != new_token {
            break (common_len, old_token, new_token);
        }
        match go_to(data, parent, &new_token)? {
            Some((next, _)) => parent = next,
            // Only a bar's `!` makes a step the old bytes lack: part right here.
            None => break (common_len, old_token, new_token),
        }
    };
    let mut header = &data[parent..];
    let is_array = match read_value(&mut header).map_err(corrupt)? {
        Value::Array(_) => {
            if !matches!(new_token, Token::Num(_)) {
                return Err(walk.error("can not update array by non-integer index"));
            }
            true
        }
        Value::Map(_) => {
            if !matches!(new_token, Token::Str(_)) {
                return Err(walk.error("can not update map by non-string key"));
            }
            false
        }
        _ => return Err(walk.no_such_field()),
    };
    walk.token = new_token;
    walk.consumed = false;
    let split_at = old.offset;
    let mut child = std::mem::replace(node, Node::Nop(data));
    match &mut child {
        Node::Route(route) => {
            route.path = &route.path[split_at..];
            if route.path.is_empty() {
                let Node::Route(route) = child else {
                    return Err(StorageError::InvalidMsgpack("tuple"));
                };
                child = route.next;
            }
        }
        Node::Bar(bar) => bar.path = &bar.path[split_at..],
        _ => {}
    }
    let next_hop = match (is_array, old_token) {
        (true, Token::Num(index)) => branch_array(data, parent, child, index)?,
        (false, Token::Str(key)) => branch_map(data, parent, child, key)?,
        _ => return Err(StorageError::InvalidMsgpack("tuple")),
    };
    if common_len == 0 {
        *node = next_hop;
        return Ok(node);
    }
    *node = Node::Route(Box::new(Route {
        data,
        path: &old_path[..common_len],
        next: next_hop,
    }));
    match node {
        Node::Route(route) => Ok(&mut route.next),
        _ => Err(StorageError::InvalidMsgpack("tuple")),
    }
}

/// A bar that ends right at the split and inserts or deletes changes its parent's header
/// and neighbours: it cannot be moved, its op is done again on the new node.
fn must_redo<'x>(child: &Node<'x>) -> Option<BarKind<'x>> {
    match child {
        Node::Bar(bar)
            if bar.path.is_empty()
                && matches!(bar.kind, BarKind::Insert { .. } | BarKind::Delete { .. }) =>
        {
            Some(bar.kind)
        }
        _ => None,
    }
}

fn branch_array<'x>(
    data: &'x [u8],
    parent: usize,
    mut child: Node<'x>,
    index: i32,
) -> Result<Node<'x>> {
    let Some(mut array) = array_node(data, parent)? else {
        return Err(StorageError::InvalidMsgpack("tuple"));
    };
    let position = usize::try_from(index).map_err(corrupt)?;
    match must_redo(&child) {
        None => {
            let Some(element) = array.items.get(position).map(Node::data) else {
                return Err(StorageError::InvalidMsgpack("tuple"));
            };
            child.rebase(element);
            array.items[position] = child;
        }
        Some(BarKind::Insert { value, .. }) => {
            let position = position.min(array.items.len());
            array.items.insert(position, Node::Nop(value));
        }
        Some(BarKind::Delete { count }) => {
            let end = position
                .saturating_add(count as usize)
                .min(array.items.len());
            array.items.drain(position.min(end)..end);
        }
        Some(BarKind::Replace(_)) => {}
    }
    Ok(Node::Array(Box::new(array)))
}

fn branch_map<'x>(
    data: &'x [u8],
    parent: usize,
    mut child: Node<'x>,
    key: &'x [u8],
) -> Result<Node<'x>> {
    let whole = value_at(data, parent)?;
    let mut cursor = whole;
    let Value::Map(count) = read_value(&mut cursor).map_err(corrupt)? else {
        return Err(StorageError::InvalidMsgpack("tuple"));
    };
    let body = cursor;
    let mut map = MapNode {
        data: whole,
        size: count,
        items: Vec::new(),
    };
    let redo = must_redo(&child);
    if redo.is_none() {
        // `xrow_update_map_create_with_child`.
        let Some((value_at_, key_at)) = go_to_key(whole, 0, key)? else {
            return Err(StorageError::InvalidMsgpack("tuple"));
        };
        let body_start = whole.len() - body.len();
        let value = value_at(whole, value_at_)?;
        let value_end = value_at_ + value.len();
        map.items.push(MapItem {
            key: None,
            field: Node::Nop(&[]),
            tail: &whole[body_start..key_at],
        });
        child.rebase(value);
        map.items.push(MapItem {
            key: Some(key),
            field: child,
            tail: &whole[value_end..],
        });
        return Ok(Node::Map(Box::new(map)));
    }
    if count > 0 {
        map.items.push(MapItem {
            key: None,
            field: Node::Nop(&[]),
            tail: body,
        });
    }
    // Done again as `xrow_update_op_do_map_*` does it, moving the key like any op.
    let op = UpdateOp {
        opcode: b'=',
        target: super::Target {
            field_no: 0,
            nested_at: 0,
            path: None,
        },
        kind: OpKind::Delete(1),
    };
    let mut walk = Walk {
        op: &op,
        lexer: Lexer::new(&[]),
        token: Token::Str(key),
        consumed: false,
    };
    let found = map_find(&mut walk, &mut map)?;
    match redo {
        Some(BarKind::Insert { value, .. }) => {
            map.size += 1;
            map.items.push(MapItem {
                key: Some(key),
                field: Node::Nop(value),
                tail: &[],
            });
        }
        Some(BarKind::Delete { .. }) => {
            if let Some(index) = found {
                map.items[index].key = None;
                map.items[index].field = Node::Nop(&[]);
                map.size -= 1;
            }
        }
        _ => {}
    }
    Ok(Node::Map(Box::new(map)))
}

fn store(node: &Node<'_>, out: &mut Vec<u8>) -> Result<()> {
    match node {
        Node::Nop(data) => out.extend_from_slice(data),
        Node::Scalar { content, .. } => write_content(out, content),
        Node::Array(array) => {
            let count = u32::try_from(array.items.len()).map_err(corrupt)?;
            write_array_len(out, count);
            for item in &array.items {
                store(item, out)?;
            }
        }
        Node::Map(map) => {
            write_map_len(out, map.size);
            for item in map.items.iter().rev() {
                if let Some(key) = item.key {
                    write_str(out, key);
                    store(&item.field, out)?;
                }
            }
            for item in map.items.iter().rev() {
                out.extend_from_slice(item.tail);
            }
        }
        Node::Bar(bar) => store_bar(bar, out)?,
        Node::Route(route) => {
            let hop = route.next.data();
            let before = (hop.as_ptr() as usize)
                .checked_sub(route.data.as_ptr() as usize)
                .filter(|&before| before + hop.len() <= route.data.len())
                .ok_or(StorageError::InvalidMsgpack("tuple"))?;
            out.extend_from_slice(&route.data[..before]);
            store(&route.next, out)?;
            out.extend_from_slice(&route.data[before + hop.len()..]);
        }
    }
    Ok(())
}

fn store_bar(bar: &Bar<'_>, out: &mut Vec<u8>) -> Result<()> {
    let data = bar.data;
    let point_end = bar.point + bar.point_size;
    if point_end > data.len() || bar.parent > data.len() {
        return Err(StorageError::InvalidMsgpack("tuple"));
    }
    match bar.kind {
        BarKind::Replace(content) => {
            out.extend_from_slice(&data[..bar.point]);
            write_content(out, &content);
            out.extend_from_slice(&data[point_end..]);
        }
        BarKind::Insert { value, new_key } => {
            out.extend_from_slice(&data[..bar.parent]);
            let mut body = &data[bar.parent..];
            match (read_value(&mut body).map_err(corrupt)?, new_key) {
                (Value::Map(size), Some(key)) => {
                    write_map_len(out, size + 1);
                    write_str(out, key);
                    out.extend_from_slice(value);
                    out.extend_from_slice(body);
                }
                (Value::Array(size), _) => {
                    write_array_len(out, size + 1);
                    let body_start = data.len() - body.len();
                    out.extend_from_slice(&data[body_start..bar.point]);
                    out.extend_from_slice(value);
                    out.extend_from_slice(&data[bar.point..]);
                }
                _ => return Err(StorageError::InvalidMsgpack("tuple")),
            }
        }
        BarKind::Delete { count } => {
            out.extend_from_slice(&data[..bar.parent]);
            let mut body = &data[bar.parent..];
            match read_value(&mut body).map_err(corrupt)? {
                Value::Array(size) => write_array_len(out, size - count.min(size)),
                Value::Map(size) => write_map_len(out, size.saturating_sub(1)),
                _ => return Err(StorageError::InvalidMsgpack("tuple")),
            }
            let body_start = data.len() - body.len();
            out.extend_from_slice(&data[body_start..bar.point]);
            out.extend_from_slice(&data[point_end..]);
        }
    }
    Ok(())
}
