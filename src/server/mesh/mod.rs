//! The channel mesh between cores: one core's context and its batched messages to the
//! others, and the bytes that cross.
//!
//! * [`core`]: one core's shard, its ends of the mesh, its queues, waiters and sends.
//! * [`serve`]: serving a peer's batch on this core, and delivering the replies that come back.
//! * [`batch`]: the byte layout of a batch of requests or replies.
//! * [`inbox`]: where a session's replies from other cores land.
//! * [`crud_payloads`]: a crud call's shard-side work as it crosses cores.

pub mod batch;
pub mod core;
pub mod crud_payloads;
pub mod inbox;
mod serve;
