//! The memtx core of one shard: tuples, formats, keys, indexes, spaces, update and upsert.
//!
//! Pure and synchronous. It owns the in-memory data of one shard and every rule about it
//! (field types, key order, iterator semantics, update operations, memory quota). It must
//! not know about sockets, executors, files or the IPROTO wire format.
//!
//! * [`crate::msgpack`] reads values; [`field_type`] classifies them; [`key`] orders them, strings
//!   of ICU collations by [`collation`]'s sort keys.
//! * [`tuple`] stores them with a field map; [`index`] and [`range`] find them, over
//!   [`btree`]'s B+trees for TREE indexes (keyed by `u64` on one unsigned part, by
//!   [`btree::bytes`] otherwise).
//! * [`space`] applies insert/replace/update/upsert/delete/select, each write returning
//!   the [`change`] it made (what undoing it needs); [`update`] the ops.
//! * [`bulk`] sorts the keys of bulk index builds.
//! * [`slab`] is where tuples live: the shard's arena of pages, a slab of size classes per
//!   space; [`memory`] is the shard's byte quota, which holds the arena and counts its pages.
//! * [`text`] prints values in error messages.

#[allow(unsafe_code)]
pub mod btree;
pub mod bulk;
pub mod change;
pub mod collation;
pub mod engine;
pub mod error;
pub mod field_type;
pub mod index;
pub mod key;
pub mod memory;
#[allow(unsafe_code)]
pub mod prefetch;
pub mod range;
#[allow(unsafe_code)]
pub mod slab;
pub mod space;
pub mod text;
#[allow(unsafe_code)]
pub mod tuple;
pub mod update;

pub use change::Change;
pub use engine::Engine;
pub use error::{Result, StorageError};
pub use field_type::FieldType;
pub use index::{IndexDef, IndexKind};
pub use key::{Collation, KeyDef, KeyPart};
pub use memory::MemoryQuota;
pub use range::IteratorType;
pub use space::{Space, SpaceDef};
pub use tuple::{FieldDef, SpaceFormat, Tuple, TupleRef};
