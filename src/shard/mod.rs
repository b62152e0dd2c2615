//! One core's state: its slice of every space, and the execution of decoded requests
//! against it, with the reply written straight into the caller's buffer.
//!
//! Knows nothing of sockets, executors or other shards: routing and fan-out are the
//! server's. Storage errors become Tarantool error replies here, in one place
//! ([`errors`]), since this is where a request's outcome turns into bytes.

pub mod errors;

use crate::protocol::reply::DataReply;
use crate::protocol::request::{Request, Select};
use crate::storage::{Engine, Result, Tuple};
use bumpalo::Bump;

pub struct Shard {
    pub id: usize,
    pub engine: Engine,
    /// Scratch for the work of one batch or one merge (for example the streams of a
    /// fanned-out select). Whoever uses it resets it when done; nothing in it outlives a
    /// synchronous stretch of code, so no await ever sees it.
    pub arena: Bump,
}

/// Where [`Shard::scan`] writes its entries: a heap buffer or the shard's arena.
pub trait ScanSink {
    fn put(&mut self, bytes: &[u8]);
}

impl ScanSink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl ScanSink for bumpalo::collections::Vec<'_, u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Shard {
    pub fn new(id: usize, engine: Engine) -> Shard {
        Shard {
            id,
            engine,
            arena: Bump::new(),
        }
    }

    /// Executes a data request (select or write) on this shard's slice and appends the
    /// whole reply packet, success or error, to `out`. Other request types are the
    /// server's and are not expected here.
    pub fn execute(
        &mut self,
        sync: u64,
        schema_version: u64,
        request: &Request<'_>,
        out: &mut Vec<u8>,
    ) {
        let start = out.len();
        let outcome = match request {
            Request::Select(select) => self.select(select, sync, schema_version, out),
            Request::Insert(insert) => {
                let result = self
                    .engine
                    .space_mut(insert.space_id)
                    .and_then(|s| s.insert(insert.tuple));
                reply_with_one(result.map(Some), sync, schema_version, out)
            }
            Request::Replace(replace) => {
                let result = self
                    .engine
                    .space_mut(replace.space_id)
                    .and_then(|s| s.replace(replace.tuple));
                reply_with_one(result.map(Some), sync, schema_version, out)
            }
            Request::Update(update) => {
                let result = self.engine.space_mut(update.space_id).and_then(|s| {
                    s.update(update.index_id, update.key, update.ops, update.index_base)
                });
                reply_with_one(result, sync, schema_version, out)
            }
            Request::Delete(delete) => {
                let result = self
                    .engine
                    .space_mut(delete.space_id)
                    .and_then(|s| s.delete(delete.index_id, delete.key));
                reply_with_one(result, sync, schema_version, out)
            }
            Request::Upsert(upsert) => {
                let result = self
                    .engine
                    .space_mut(upsert.space_id)
                    .and_then(|s| s.upsert(upsert.tuple, upsert.ops, upsert.index_base));
                reply_with_one(result.map(|()| None), sync, schema_version, out)
            }
            _ => {
                debug_assert!(false, "not a data request: {request:?}");
                Ok(())
            }
        };
        if let Err(error) = outcome {
            out.truncate(start);
            errors::encode_storage_error(out, sync, schema_version, &error);
        }
    }

    fn select(
        &self,
        select: &Select<'_>,
        sync: u64,
        schema_version: u64,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let space = self.engine.space(select.space_id)?;
        let entries = space.select(select.index_id, select.iterator, select.key)?;
        let mut data = DataReply::begin(out, sync, schema_version);
        for (_, tuple) in entries
            .skip(select.offset as usize)
            .take(select.limit as usize)
        {
            data.push_raw(out, tuple.data());
        }
        data.finish(out);
        Ok(())
    }

    /// The part of a fanned-out select this shard contributes: up to `limit` entries in
    /// index order, as `[key length u32 LE][key][tuple]`, for the accepting core to merge.
    pub fn scan(&self, select: &Select<'_>, limit: usize, out: &mut impl ScanSink) -> Result<()> {
        let space = self.engine.space(select.space_id)?;
        for (key, tuple) in space
            .select(select.index_id, select.iterator, select.key)?
            .take(limit)
        {
            let key = key.as_bytes();
            out.put(&(key.len() as u32).to_le_bytes());
            out.put(key);
            out.put(tuple.data());
        }
        Ok(())
    }

    /// Checks that [`Shard::scan`] of `select` would succeed, without walking anything.
    pub fn check_scan(&self, select: &Select<'_>) -> Result<()> {
        let space = self.engine.space(select.space_id)?;
        space.select(select.index_id, select.iterator, select.key)?;
        Ok(())
    }
}

fn reply_with_one(
    result: Result<Option<Tuple>>,
    sync: u64,
    schema_version: u64,
    out: &mut Vec<u8>,
) -> Result<()> {
    let tuple = result?;
    let mut data = DataReply::begin(out, sync, schema_version);
    if let Some(tuple) = tuple {
        data.push_raw(out, tuple.data());
    }
    data.finish(out);
    Ok(())
}
