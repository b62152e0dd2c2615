//! `crud.select` / `count` / `min` / `max`: conditions, the scan plan, the per-shard scan
//! and the merge (spec §18.5).
//!
//! A plan is data ([`SelectPlan`]) so that it can be sent to every shard. Each shard walks
//! its slice of the scan index lazily from `after`, keeps the tuples that pass the
//! filters and stops at `first` ([`scan_shard`]); the accepting core merges the shards'
//! runs by the scan index's encoded entry key ([`merge_rows`]). Memory per select is at
//! most `first` rows per shard.
//!
//! Comparisons in filters use storage's order-preserving key encoding: both sides are
//! encoded as nullable `scalar` key parts (with the field's index collation, if any), so
//! numbers compare mathematically across representations, values of different types by
//! Tarantool's class order, and nil first; multi-part (index) conditions compare
//! lexicographically over the parts given, as crud's generated filters do.

use super::error::{by_func, CrudError};
use super::mp;
use super::result::Columns;
use super::write::OpBytes;
use super::Func;
use crate::storage::index::{Index, IndexIter, IndexKey};
use crate::storage::key::{prefix_successor, KeyBuf, SearchKeyBuf};
use crate::storage::range::{flags, KeyRange};
use crate::storage::{
    Collation, Engine, FieldType, IndexKind, IteratorType, KeyPart, Space, StorageError, TupleRef,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Operator {
    fn parse(symbol: &str) -> Option<Operator> {
        Some(match symbol {
            "==" | "=" => Operator::Eq,
            "<" => Operator::Lt,
            "<=" => Operator::Le,
            ">" => Operator::Gt,
            ">=" => Operator::Ge,
            _ => return None,
        })
    }

    pub fn iterator(self) -> IteratorType {
        match self {
            Operator::Eq => IteratorType::Eq,
            Operator::Lt => IteratorType::Lt,
            Operator::Le => IteratorType::Le,
            Operator::Gt => IteratorType::Gt,
            Operator::Ge => IteratorType::Ge,
        }
    }

    fn holds(self, ordering: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            Operator::Eq => ordering == Equal,
            Operator::Lt => ordering == Less,
            Operator::Le => ordering != Greater,
            Operator::Gt => ordering == Greater,
            Operator::Ge => ordering != Less,
        }
    }
}

/// One parsed condition `[operator, operand, value]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Condition<'a> {
    pub operator: Operator,
    pub operand: &'a str,
    /// Raw msgpack; nil when the condition has two elements.
    pub value: &'a [u8],
}

/// Parses the conditions argument (nil or an array). An error is a ParseConditionError's
/// text and the line of `crud/compare/conditions.lua` that creates it (crud 1.7.5 checks a
/// condition's shape, its operator's type, the operator, then the operand's type).
pub fn parse_conditions(raw: &[u8]) -> Result<Vec<Condition<'_>>, (String, u32)> {
    if mp::is_nil(raw) {
        return Ok(Vec::new());
    }
    let items = mp::array_items(raw).unwrap_or_default();
    let mut conditions = Vec::with_capacity(items.len());
    for (at, item) in items.into_iter().enumerate() {
        let number = at + 1;
        if mp::lua_type(item) != "table" {
            return Err((
                format!(
                    "Each condition should be table, got \"{}\" (condition {number})",
                    mp::lua_type(item)
                ),
                93,
            ));
        }
        // A map's `#` is 0: as short as a condition can not be.
        let parts = mp::array_items(item).unwrap_or_default();
        let length = parts
            .iter()
            .rposition(|part| !mp::is_nil(part))
            .map_or(0, |last| last + 1);
        if !(2..=3).contains(&length) {
            return Err((
                format!(
                    "Each condition should be {{\"<operator>\", \"<operand>\", <value>}} (condition {number})"
                ),
                100,
            ));
        }
        let symbol_raw = parts[0];
        let Some(symbol) = mp::as_str(symbol_raw) else {
            return Err((
                format!(
                    "condition[1] should be string, got \"{}\" (condition {number})",
                    mp::lua_type(symbol_raw)
                ),
                108,
            ));
        };
        let Some(operator) = Operator::parse(symbol) else {
            return Err((
                format!(
                    "condition[1] \"{symbol}\" isn't a valid condition operator, (condition {number})"
                ),
                115,
            ));
        };
        let operand_raw = parts[1];
        let Some(operand) = mp::as_str(operand_raw) else {
            return Err((
                format!(
                    "condition[2] should be string, got \"{}\" (condition {number})",
                    mp::lua_type(operand_raw)
                ),
                123,
            ));
        };
        conditions.push(Condition {
            operator,
            operand,
            value: parts.get(2).copied().unwrap_or(mp::NIL),
        });
    }
    Ok(conditions)
}

/// A condition kept as a per-tuple filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    operator: Operator,
    /// The tuple fields compared, in order (one for a field, the given parts of an index).
    fields: Vec<u32>,
    collations: Vec<Collation>,
    /// The condition's value encoded as nullable scalar parts, one per entry of `fields`.
    value: KeyBuf,
    /// The operand names nothing (or the value cannot be compared): no tuple passes.
    never: bool,
}

fn comparison_part(collation: Collation) -> KeyPart {
    KeyPart {
        collation,
        ..KeyPart::new(0, FieldType::Scalar).nullable()
    }
}

/// Encodes `value` for a comparison; `false` when scalar comparison cannot hold it.
fn encode_comparable(raw: &[u8], collation: Collation, out: &mut KeyBuf) -> bool {
    let part = comparison_part(collation);
    let value = mp::value(raw);
    if !part.accepts(&value) {
        return false;
    }
    part.encode(&value, out);
    true
}

/// The collation the space's indexes give `field_no` (crud compares with it).
fn field_collation(space: &Space, field_no: u32) -> Collation {
    space
        .indexes()
        .iter()
        .flat_map(|index| index.def.key_def.parts.iter())
        .find(|part| part.field_no == field_no)
        .map_or(Collation::None, |part| part.collation)
}

impl Filter {
    fn new(space: &Space, condition: &Condition<'_>) -> Filter {
        let mut filter = Filter {
            operator: condition.operator,
            fields: Vec::new(),
            collations: Vec::new(),
            value: KeyBuf::new(),
            never: false,
        };
        let values: Vec<&[u8]> =
            if let Some(field_no) = space.format.field_no_by_name(condition.operand) {
                filter.fields.push(field_no);
                vec![condition.value]
            } else if let Some(index) = index_by_name(space, condition.operand) {
                let values = match mp::array_items(condition.value) {
                    Some(values) => values,
                    None => vec![condition.value],
                };
                let parts = &index.def.key_def.parts;
                filter.fields = parts
                    .iter()
                    .take(values.len())
                    .map(|p| p.field_no)
                    .collect();
                values
            } else {
                filter.never = true;
                return filter;
            };
        for (&field_no, value) in filter.fields.iter().zip(&values) {
            let collation = field_collation(space, field_no);
            filter.collations.push(collation);
            if !encode_comparable(value, collation, &mut filter.value) {
                filter.never = true;
            }
        }
        filter
    }

    /// Whether `tuple` (msgpack array bytes) passes.
    pub fn passes(&self, tuple: &[u8]) -> bool {
        if self.never {
            return false;
        }
        let max = self
            .fields
            .iter()
            .map(|&f| f as usize + 1)
            .max()
            .unwrap_or(0);
        let Some(values) = mp::tuple_fields(tuple, max) else {
            return false;
        };
        let mut encoded = KeyBuf::new();
        for (&field_no, &collation) in self.fields.iter().zip(&self.collations) {
            let raw = values.get(field_no as usize).copied().unwrap_or(mp::NIL);
            if !encode_comparable(raw, collation, &mut encoded) {
                return false;
            }
        }
        self.operator
            .holds(encoded.as_slice().cmp(self.value.as_slice()))
    }
}

/// Where a select scans and what it keeps: everything a shard needs, nothing it does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectPlan {
    pub space_id: u32,
    pub index_id: u32,
    /// EQ, LT, LE, GT or GE (min/max: GE / LE with an empty key).
    pub iterator: IteratorType,
    /// The scan key: a msgpack array of up to the index's part count.
    pub key: Vec<u8>,
    pub filters: Vec<Filter>,
    /// The encoded entry key of the scan index (index parts, then primary key parts for a
    /// non-unique index) of `opts.after`: the walk continues strictly after it.
    pub after: Option<KeyBuf>,
    /// At most this many rows (|first|); `None` = all.
    pub limit: Option<u64>,
    /// Negative `first`: walk from `after` against the iterator's direction, then present
    /// the rows in the iterator's order ([`merge_rows`] flips them back).
    pub reverse: bool,
}

impl SelectPlan {
    /// Whether the shards walk (and the merge orders) by descending key.
    pub fn walks_descending(&self) -> bool {
        self.iterator.is_descending() != self.reverse
    }
}

/// A planned select: the shards' plan, and the columns the accepting core returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub plan: SelectPlan,
    pub columns: Columns,
}

pub fn index_by_name<'s>(space: &'s Space, name: &str) -> Option<&'s Index> {
    space
        .indexes()
        .iter()
        .find(|index| &*index.def.name == name)
}

/// crud's scan choice: the first condition whose operand is a TREE index's name, or the
/// name of the field that is the first part of a TREE index (lowest id).
fn scan_index_for<'s>(space: &'s Space, condition: &Condition<'_>) -> Option<&'s Index> {
    let trees = || {
        space
            .indexes()
            .iter()
            .filter(|i| i.def.kind == IndexKind::Tree)
    };
    if let Some(index) = trees().find(|index| &*index.def.name == condition.operand) {
        return Some(index);
    }
    let field_no = space.format.field_no_by_name(condition.operand)?;
    trees().find(|index| index.def.key_def.parts[0].field_no == field_no)
}

/// The field numbers of an index's entry key: its parts, then (non-unique) the primary
/// key's parts, as the index orders its entries.
fn entry_key_parts(space: &Space, index: &Index) -> Vec<KeyPart> {
    let mut parts: Vec<KeyPart> = index.def.key_def.parts.to_vec();
    if !index.def.unique {
        parts.extend(space.indexes()[0].def.key_def.parts.iter().copied());
    }
    parts
}

/// Why a select or count was not planned.
#[derive(Debug)]
pub enum PlanError {
    /// The router's own error.
    Error(CrudError),
    /// What every storage would answer (the scan key or the cursor does not fit the scan
    /// index): the caller wraps it as its storage errors are wrapped.
    Storage(String),
}

impl From<CrudError> for PlanError {
    fn from(error: CrudError) -> PlanError {
        PlanError::Error(error)
    }
}

/// Plans `crud.select` (and `crud.count`, with `first`, `after` and `fields` absent).
/// Conditions are parsed before the space is looked up (`space` is `Err` with its name
/// when it is missing), as crud does.
pub fn plan_select(
    func: Func,
    space: Result<&Space, &str>,
    conditions: &[u8],
    fields: Option<&[u8]>,
    first: Option<i64>,
    after: Option<&[u8]>,
) -> Result<Planned, PlanError> {
    let conditions = parse_conditions(conditions)
        .map_err(|(message, line)| by_func::parse_conditions_failed(func, &message, line))?;
    let space = space.map_err(|name| by_func::no_such_space(func, name))?;
    let scan = conditions
        .iter()
        .enumerate()
        .find_map(|(at, condition)| scan_index_for(space, condition).map(|index| (at, index)));
    let primary = &space.indexes()[0];
    let (index, iterator, key, scan_at) = match scan {
        Some((at, index)) => {
            let condition = &conditions[at];
            let key = if &*index.def.name == condition.operand
                && mp::array_items(condition.value).is_some()
            {
                condition.value.to_vec()
            } else if mp::is_nil(condition.value) && &*index.def.name == condition.operand {
                vec![0x90]
            } else {
                mp::array_of(std::iter::once(condition.value))
            };
            (index, condition.operator.iterator(), key, Some(at))
        }
        None if primary.def.kind != IndexKind::Tree => {
            return Err(by_func::no_tree_index(func).into());
        }
        None => (primary, IteratorType::Ge, vec![0x90], None),
    };
    let mut encoded = SearchKeyBuf::new();
    index
        .def
        .key_def
        .encode_search_key(&key, &mut encoded)
        .map_err(|error| PlanError::Storage(error.to_string()))?;
    let filters = conditions
        .iter()
        .enumerate()
        .filter(|(at, _)| Some(*at) != scan_at)
        .map(|(_, condition)| Filter::new(space, condition))
        .collect();
    let columns = super::result::resolve_fields(&space.format, fields)?;
    let entry_parts = entry_key_parts(space, index);
    let columns = columns.enriched(entry_parts.iter().map(|part| part.field_no));
    let after = match after {
        Some(after) => Some(after_key(&entry_parts, &columns, after).map_err(PlanError::Storage)?),
        None => None,
    };
    Ok(Planned {
        plan: SelectPlan {
            space_id: space.id,
            index_id: index.def.id,
            iterator,
            key,
            filters,
            after,
            limit: first.map(i64::unsigned_abs),
            reverse: first.is_some_and(|first| first < 0),
        },
        columns,
    })
}

/// Encodes the scan entry key of `opts.after`, a tuple in the layout of `columns`.
fn after_key(parts: &[KeyPart], columns: &Columns, after: &[u8]) -> Result<KeyBuf, String> {
    let values = mp::array_items(after).unwrap_or_default();
    let mut key = KeyBuf::new();
    for (part_no, part) in parts.iter().enumerate() {
        let raw = columns
            .position_of(part.field_no)
            .and_then(|at| values.get(at).copied())
            .unwrap_or(mp::NIL);
        let value = mp::value(raw);
        if !part.accepts(&value) {
            // The storage refuses the cursor as a key of the scan index.
            return Err(format!(
                "Supplied key type of part {part_no} does not match index part type: expected {}",
                part.field_type.name()
            ));
        }
        part.encode(&value, &mut key);
    }
    Ok(key)
}

/// Plans `crud.min` / `crud.max` on `index` (name, id, or nil for the primary).
pub fn plan_border(space: &Space, index: &[u8], max: bool) -> Result<SelectPlan, String> {
    let found = match mp::value(index) {
        crate::msgpack::Value::Nil => space.indexes().first(),
        crate::msgpack::Value::Str(_) => {
            mp::as_str(index).and_then(|name| index_by_name(space, name))
        }
        crate::msgpack::Value::Uint(id) => {
            space.indexes().iter().find(|i| u64::from(i.def.id) == id)
        }
        _ => None,
    };
    let Some(found) = found else {
        let mut name = Vec::new();
        super::bucket::lua_tostring(index, &mut name);
        return Err(format!(
            "Index \"{}\" of space \"{}\" doesn't exist",
            String::from_utf8_lossy(&name),
            space.name
        ));
    };
    Ok(SelectPlan {
        space_id: space.id,
        index_id: found.def.id,
        iterator: if max {
            IteratorType::Le
        } else {
            IteratorType::Ge
        },
        key: vec![0x90],
        filters: Vec::new(),
        after: None,
        limit: Some(1),
        reverse: false,
    })
}

/// Opens the plan's walk of one shard's space: the iterator's range, narrowed to start
/// strictly after `after` (or, reversed, to end strictly before it), in walk direction.
pub fn open_scan<'s>(space: &'s Space, plan: &SelectPlan) -> Result<IndexIter<'s>, StorageError> {
    let index = space.index(plan.index_id)?;
    let mut encoded = SearchKeyBuf::new();
    let parts = index
        .def
        .key_def
        .encode_search_key(&plan.key, &mut encoded)?;
    index.check_iterator(plan.iterator, parts, &space.name)?;
    if index.def.kind != IndexKind::Tree {
        return Ok(index.iter(&KeyRange::ALL, IteratorType::All, &[]));
    }
    let mut successor = SearchKeyBuf::new();
    let has_successor = prefix_successor(&encoded, &mut successor);
    let mut range = KeyRange::for_iterator(
        plan.iterator,
        &encoded,
        has_successor.then_some(&successor[..]),
    );
    if let Some(after) = &plan.after {
        // In key order, "after" in an ascending walk (or "before" in a reversed
        // descending one) is a start bound; otherwise an end bound.
        let raise_start = plan.iterator.is_descending() == plan.reverse;
        if raise_start {
            let start_unbounded = range.flags & flags::START_UNBOUNDED != 0;
            if start_unbounded || after.as_slice() >= range.start {
                range.start = after;
                range.flags = (range.flags & !flags::START_UNBOUNDED) | flags::START_EXCLUSIVE;
            }
        } else {
            let end_unbounded = range.flags & flags::END_UNBOUNDED != 0;
            if end_unbounded || after.as_slice() <= range.end {
                range.end = after;
                range.flags = (range.flags & !flags::END_UNBOUNDED) | flags::END_EXCLUSIVE;
            }
        }
    }
    if plan.walks_descending() {
        range.flags |= flags::DESCENDING;
    } else {
        range.flags &= !flags::DESCENDING;
    }
    Ok(index.iter(&range, plan.iterator, &encoded))
}

/// Whether an entry key lies strictly past `after` in walk direction (always true
/// without `after`). [`open_scan`] already starts there; this keeps [`matching`] right
/// for any iterator it is given.
fn past_after(plan: &SelectPlan, key: &IndexKey<'_>, tuple: &TupleRef<'_>) -> bool {
    let Some(after) = &plan.after else {
        return true;
    };
    let mut scratch = SearchKeyBuf::new();
    let key = key.bytes(tuple, &mut scratch);
    if plan.walks_descending() {
        key < after.as_slice()
    } else {
        key > after.as_slice()
    }
}

/// The shard's rows of the plan from a walk of its scan index in walk direction: past
/// `after`, passing every filter, at most `limit`. Lazy: it reads only what it yields
/// (plus the rows filters reject).
pub fn matching<'p, 's: 'p>(
    plan: &'p SelectPlan,
    entries: impl Iterator<Item = (IndexKey<'s>, TupleRef<'s>)> + 'p,
) -> impl Iterator<Item = (IndexKey<'s>, TupleRef<'s>)> + 'p {
    let limit = plan
        .limit
        .map_or(usize::MAX, |limit| limit.min(usize::MAX as u64) as usize);
    entries
        .filter(move |(key, tuple)| {
            past_after(plan, key, tuple)
                && plan
                    .filters
                    .iter()
                    .all(|filter| filter.passes(tuple.data()))
        })
        .take(limit)
}

/// One shard's contribution: `(entry key, tuple)` pairs in walk direction, owned so they
/// can cross cores.
pub type ShardRows = Vec<(KeyBuf, Vec<u8>)>;

/// Runs the plan on one shard's engine.
pub fn scan_shard(engine: &Engine, plan: &SelectPlan) -> Result<ShardRows, StorageError> {
    let space = engine.space(plan.space_id)?;
    let entries = open_scan(space, plan)?;
    let mut scratch = SearchKeyBuf::new();
    Ok(matching(plan, entries)
        .map(|(key, tuple)| {
            let key = KeyBuf::from_slice(key.bytes(&tuple, &mut scratch));
            (key, tuple.data().to_vec())
        })
        .collect())
}

/// `crud.count` on one shard: the number of rows of the plan (no limit).
pub fn count_shard(engine: &Engine, plan: &SelectPlan) -> Result<u64, StorageError> {
    let space = engine.space(plan.space_id)?;
    let entries = open_scan(space, plan)?;
    Ok(matching(plan, entries).count() as u64)
}

/// Merges the shards' runs by entry key in walk direction, keeps `limit`, and returns the
/// tuples in the iterator's order (a reversed walk is flipped back).
pub fn merge_rows(plan: &SelectPlan, shards: Vec<ShardRows>) -> Vec<Vec<u8>> {
    let limit = plan
        .limit
        .map_or(usize::MAX, |limit| limit.min(usize::MAX as u64) as usize);
    let descending = plan.walks_descending();
    // Next unread row of each run.
    let mut cursors = vec![0usize; shards.len()];
    let mut rows = Vec::new();
    while rows.len() < limit {
        let mut best: Option<(usize, &[u8])> = None;
        for (at, run) in shards.iter().enumerate() {
            let Some((key, _)) = run.get(cursors[at]) else {
                continue;
            };
            let better = match best {
                None => true,
                Some((_, best_key)) if descending => key.as_slice() > best_key,
                Some((_, best_key)) => key.as_slice() < best_key,
            };
            if better {
                best = Some((at, key.as_slice()));
            }
        }
        let Some((at, _)) = best else { break };
        rows.push(shards[at][cursors[at]].1.clone());
        cursors[at] += 1;
    }
    if plan.reverse {
        rows.reverse();
    }
    rows
}

/// A msgpack array of a scalar key, for functions that take `key` as scalar or array; an
/// array key is used as sent.
pub fn key_array(key: &[u8]) -> OpBytes<'_> {
    if matches!(key.first(), Some(0x90..=0x9f | 0xdc | 0xdd)) && mp::is_whole_array(key) {
        return key.into();
    }
    // A one-element array header (as `write_array_len` writes it), then the key.
    const ONE: u8 = 0x91;
    let mut inline = [0u8; 24];
    if let Some(room) = inline.get_mut(1..=key.len()) {
        room.copy_from_slice(key);
        inline[0] = ONE;
        return OpBytes::Built(smallvec::SmallVec::from_buf_and_len(inline, key.len() + 1));
    }
    let mut out = smallvec::SmallVec::with_capacity(key.len() + 1);
    out.push(ONE);
    out.extend_from_slice(key);
    OpBytes::Built(out)
}
