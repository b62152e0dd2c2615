//! The storage layer's one error type.
//!
//! Each variant carries what Tarantool prints for that failure, and `Display` renders
//! Tarantool 2.11's message text word for word. The numeric Tarantool error code is
//! assigned once, at the server edge; this layer knows nothing of the wire.

use crate::msgpack::{MpType, MsgpackError};
use thiserror::Error;

/// How a tuple field is named in messages: `3` or `3 (name)`, 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldLabel {
    pub number_1based: u32,
    pub name: Option<Box<str>>,
}

impl std::fmt::Display for FieldLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{} ({})", self.number_1based, name),
            None => write!(f, "{}", self.number_1based),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum StorageError {
    #[error("Illegal parameters, {0}")]
    IllegalParams(Box<str>),
    #[error("Failed to allocate {size_bytes} bytes in {allocator} for {purpose}")]
    MemoryIssue {
        size_bytes: u64,
        allocator: &'static str,
        purpose: &'static str,
    },
    #[error("Duplicate key exists in unique index \"{index}\" in space \"{space}\" with old tuple - {old_tuple} and new tuple - {new_tuple}")]
    TupleFound {
        index: Box<str>,
        space: Box<str>,
        old_tuple: Box<str>,
        new_tuple: Box<str>,
    },
    #[error(
        "Supplied key type of part {part} does not match index part type: expected {expected}"
    )]
    KeyPartType { part: u32, expected: &'static str },
    #[error("Invalid key part count in an exact match (expected {expected}, got {actual})")]
    ExactMatch { expected: u32, actual: u32 },
    #[error("Invalid MsgPack - {0}")]
    InvalidMsgpack(&'static str),
    #[error("Tuple/Key must be MsgPack array")]
    TupleNotArray,
    #[error("Tuple field {field} type does not match one required by operation: expected {expected}, got {actual}")]
    FieldType {
        field: FieldLabel,
        expected: &'static str,
        actual: MpType,
    },
    #[error("SPLICE error on field {field}: {reason}")]
    UpdateSplice {
        field: Box<str>,
        reason: &'static str,
    },
    #[error("Argument type in operation '{op}' on field {field} does not match field type: expected {expected}")]
    UpdateArgType {
        op: char,
        field: Box<str>,
        expected: &'static str,
    },
    #[error("Unknown UPDATE operation #{op_number}: {detail}")]
    UnknownUpdateOp { op_number: u32, detail: Box<str> },
    #[error("Field {field} UPDATE error: {reason}")]
    UpdateField { field: Box<str>, reason: Box<str> },
    #[error("Invalid key part count (expected [0..{expected}], got {actual})")]
    KeyPartCount { expected: u32, actual: u32 },
    #[error("No index #{index_id} is defined in space '{space}'")]
    NoSuchIndexId { index_id: u32, space: Box<str> },
    #[error("Space '{0}' does not exist")]
    NoSuchSpace(Box<str>),
    #[error("Field {0} was not found in the tuple")]
    NoSuchFieldNo(i64),
    #[error("Tuple field count {actual} does not match space field count {expected}")]
    ExactFieldCount { actual: u32, expected: u32 },
    #[error("Tuple field {0} required by space format is missing")]
    FieldMissing(FieldLabel),
    #[error("Get() doesn't support partial keys and non-unique indexes")]
    MoreThanOneTuple,
    /// `new_tuple` is the update's new tuple (msgpack): where its primary key may live on
    /// another shard, the server asks that shard, and a key held there makes the answer 3.
    #[error("Attempt to modify a tuple field which is part of primary index in space '{space}'")]
    CantUpdatePrimaryKey {
        space: Box<str>,
        new_tuple: Box<[u8]>,
    },
    #[error("Integer overflow when performing '{op}' operation on field {field}")]
    UpdateIntegerOverflow { op: char, field: Box<str> },
    #[error("Decimal overflow when performing operation '{op}' on field {field}")]
    UpdateDecimalOverflow { op: char, field: Box<str> },
    #[error(
        "Index '{index}' ({index_type}) of space '{space}' (memtx) does not support {feature}"
    )]
    UnsupportedIndexFeature {
        index: Box<str>,
        index_type: &'static str,
        space: Box<str>,
        feature: &'static str,
    },
    #[error("View '{0}' is read-only")]
    ViewIsReadOnly(Box<str>),
    #[error("{index_type} index  does not support selects via a partial key (expected {expected} parts, got {actual}). Please Consider changing index type to TREE.")]
    PartialKey {
        index_type: &'static str,
        expected: u32,
        actual: u32,
    },
    #[error("Field '{0}' was not found in the tuple")]
    NoSuchFieldName(Box<str>),
}

impl From<MsgpackError> for StorageError {
    fn from(_: MsgpackError) -> Self {
        StorageError::InvalidMsgpack("tuple")
    }
}

pub type Result<T> = std::result::Result<T, StorageError>;
