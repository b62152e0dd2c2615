//! One core's server context: its shard, its ends of the channel mesh to the other cores,
//! and the requests it is waiting on elsewhere.
//!
//! A request for another core's data travels as its IPROTO packet bytes; the owner runs it
//! through the same `Shard::execute` and sends back the encoded reply, so a hop changes
//! nothing in what the client sees.

use crate::protocol::decode_packet;
use crate::protocol::request::Request;
use crate::server::oneshot;
use crate::server::schema::SCHEMA_VERSION;
use crate::shard::Shard;
use ahash::AHashMap;
use glommio::channels::channel_mesh::{Receivers, Senders};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// What crosses between cores.
pub enum Envelope {
    /// Run this packet (a point request) and reply with the encoded IPROTO reply.
    Execute {
        ticket: u64,
        packet: Vec<u8>,
    },
    /// Run this SELECT packet's scan, at most `limit` entries, and reply with them.
    Scan {
        ticket: u64,
        packet: Vec<u8>,
        limit: u32,
    },
    Reply {
        ticket: u64,
        bytes: Vec<u8>,
    },
}

pub struct Core {
    pub shard: RefCell<Shard>,
    pub shard_count: usize,
    senders: Senders<Envelope>,
    pending: RefCell<AHashMap<u64, oneshot::Sender<Vec<u8>>>>,
    next_ticket: Cell<u64>,
}

impl Core {
    pub fn new(shard: Shard, senders: Senders<Envelope>) -> Rc<Core> {
        let shard_count = senders.nr_consumers().max(1);
        Rc::new(Core {
            shard: RefCell::new(shard),
            shard_count,
            senders,
            pending: RefCell::default(),
            next_ticket: Cell::new(0),
        })
    }

    pub fn id(&self) -> usize {
        self.shard.borrow().id
    }

    /// Starts one task per peer that serves its requests and delivers its replies.
    pub fn listen_to_peers(self: &Rc<Core>, receivers: Receivers<Envelope>) {
        let receivers = Rc::new(receivers);
        for peer in 0..self.shard_count {
            if peer == self.id() {
                continue;
            }
            let core = self.clone();
            let receivers = receivers.clone();
            glommio::spawn_local(async move {
                while let Ok(Some(envelope)) = receivers.recv_from(peer).await {
                    core.on_envelope(peer, envelope);
                }
            })
            .detach();
        }
    }

    fn on_envelope(self: &Rc<Core>, peer: usize, envelope: Envelope) {
        match envelope {
            Envelope::Reply { ticket, bytes } => {
                if let Some(waiter) = self.pending.borrow_mut().remove(&ticket) {
                    waiter.send(bytes);
                }
            }
            Envelope::Execute { ticket, packet } => {
                let mut bytes = Vec::with_capacity(64);
                if let Ok((header, request)) = decode_packet(&packet) {
                    self.shard.borrow_mut().execute(
                        header.sync,
                        SCHEMA_VERSION,
                        &request,
                        &mut bytes,
                    );
                }
                self.send(peer, Envelope::Reply { ticket, bytes });
            }
            Envelope::Scan {
                ticket,
                packet,
                limit,
            } => {
                let mut bytes = Vec::new();
                if let Ok((_, Request::Select(select))) = decode_packet(&packet) {
                    // The accepting core ran the same scan first, so errors cannot reach here.
                    let _ = self
                        .shard
                        .borrow()
                        .scan(&select, limit as usize, &mut bytes);
                }
                self.send(peer, Envelope::Reply { ticket, bytes });
            }
        }
    }

    /// Sends without blocking the receiving loop: a full channel gets a task that waits,
    /// so two cores answering each other can never deadlock on full channels.
    fn send(self: &Rc<Core>, peer: usize, envelope: Envelope) {
        match self.senders.try_send_to(peer, envelope) {
            Ok(()) => {}
            Err(glommio::GlommioError::WouldBlock(glommio::ResourceType::Channel(envelope))) => {
                let core = self.clone();
                glommio::spawn_local(async move {
                    let _ = core.senders.send_to(peer, envelope).await;
                })
                .detach();
            }
            Err(error) => tracing::error!(peer, %error, "message to another core lost"),
        }
    }

    /// Runs a data request on this core's shard, reply into `out`; a write's reply waits
    /// for its WAL commit, and a failed commit turns it into an error.
    pub async fn execute_local(&self, sync: u64, request: &Request<'_>, out: &mut Vec<u8>) {
        let start = out.len();
        let commit = {
            let mut shard = self.shard.borrow_mut();
            shard.execute(sync, SCHEMA_VERSION, request, out);
            shard.take_commit()
        };
        if let Some(commit) = commit {
            if commit.await.is_err() {
                out.truncate(start);
                wal_failure_reply(out, sync);
            }
        }
    }

    /// Sends `make(ticket)` to `peer` and waits for its reply bytes.
    pub async fn ask(self: &Rc<Core>, peer: usize, make: impl FnOnce(u64) -> Envelope) -> Vec<u8> {
        let ticket = self.next_ticket.get();
        self.next_ticket.set(ticket + 1);
        let (sender, receiver) = oneshot::channel();
        self.pending.borrow_mut().insert(ticket, sender);
        self.send(peer, make(ticket));
        receiver.await
    }
}

/// The reply to a write whose WAL row could not be written: never an acknowledgement.
fn wal_failure_reply(out: &mut Vec<u8>, sync: u64) {
    crate::protocol::reply::encode_error(
        out,
        sync,
        SCHEMA_VERSION,
        crate::protocol::ErrorCode::ER_WAL_IO,
        "Failed to write to disk",
    );
}
