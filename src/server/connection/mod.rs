//! One client connection over TCP: the greeting, the size-prefix framing, the read and
//! write buffers, and the connection's end (at the client's close, or the server's shutdown).
//! What each packet means is the [`Session`]'s business; accepting and placing connections
//! is the listener's ([`crate::server::listen`]).
//!
//! Every complete packet in the read buffer is submitted before any reply is awaited, so the
//! requests one read brings for other cores travel in one batch per core. Replies are
//! gathered in arrival order and written before more is read, so a client that does not read
//! gets backpressure instead of unbounded buffering.
//!
//! Memory: a connection's buffers (a 64 KiB read buffer, the reply buffer and the packet
//! list) are lent to it by its core's [`CoreConnections`] only while it has bytes to work on.
//! A connection waiting for its client gives them back, keeping at most the few bytes of a
//! partial packet, so an idle connection costs its task, session and socket (~3 KiB; see
//! README, Limits). A packet larger than the read buffer grows it as its bytes arrive (never
//! to the size its prefix announces, so a prefix alone costs nothing), and the buffer shrinks
//! back once that packet is done. The core keeps a few spare sets for the next connection
//! that has work, and counts what all of them hold ([`NetStats`], in `box.info` and the
//! shutdown log).
//!
//! Shutdown ([`CoreConnections::stop_reading`]): a connection finishes the requests it has
//! read (one read's packets), writes their replies, reads nothing more, and closes once the
//! client's side has acknowledged every reply byte, so none is lost to a reset.

use crate::protocol::frame::{parse_frame_len, FrameLen};
use crate::protocol::reply;
use crate::protocol::ProtocolError;
use crate::server::os;
use crate::server::session::{Deferred, Session};
use futures_lite::{AsyncRead, AsyncWriteExt};
use glommio::net::TcpStream;

use std::ops::Range;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;

use std::task::{Context, Poll};
use std::time::{Duration, Instant};

mod core_connections;

use core_connections::Buffers;
pub use core_connections::{CoreConnections, NetStats};

/// The read buffer lent for each read: one read brings a pipeline's packets (many per
/// read under load). A larger packet grows the buffer up to `max_packet_size`.
pub(super) const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Replies gathered past this size are written before more requests are handled.
pub(super) const WRITE_FLUSH_BYTES: usize = 256 * 1024;
/// What each of a session's own buffers (the places, replies and commits of a pipeline's
/// requests) may keep while its connection is idle: a 128-deep pipeline fits, so a steady
/// one does not free and regrow them at each pause.
const SESSION_KEPT_BYTES_MAX: usize = 16 * 1024;
/// After a protocol error reply, how long the connection waits for the client to take it
/// before it closes anyway.
const ERROR_LINGER: Duration = Duration::from_secs(1);
/// How often a closing connection looks whether the client took every reply byte.
const DELIVERY_POLL: Duration = Duration::from_millis(1);

/// A set of buffers lent to a connection, with the bytes it was counted at.
struct Lent {
    buffers: Buffers,
    counted_bytes: usize,
}

/// What waiting for the client brought.
enum Arrived {
    Bytes(usize),
    /// The client closed its side, or the socket failed.
    End,
    /// The server is shutting down: read nothing more.
    Stopping,
}

pub struct Connection {
    session: Session,
    connections: Rc<CoreConnections>,
    slot: usize,
    /// The buffers, while the connection has bytes to work on.
    lent: Option<Lent>,
    /// The bytes of a partial packet, kept while the buffers are given back.
    partial: Vec<u8>,
    /// Bytes at the start of the read buffer (or in `partial`) not yet handled.
    filled: usize,
    /// The session's own buffers, as last counted (when the connection went idle).
    session_counted_bytes: usize,
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(lent) = self.lent.take() {
            self.connections.give_back(lent.buffers, lent.counted_bytes);
        }
        let counted = self.partial.capacity() + self.session_counted_bytes;
        self.connections.count_buffers(0, counted);
        self.connections.close(self.slot, counted);
    }
}

impl Connection {
    /// Serves the connection until the client closes it, it fails, or the server stops.
    async fn serve(mut self, mut stream: TcpStream, on_close: impl FnOnce()) {
        if let Err(error) = self.serve_on(&mut stream).await {
            tracing::debug!(%error, "connection closed with an error");
        }
        // Out of the registry before the socket closes (see `CoreConnections::cut`).
        drop(self);
        drop(stream);
        on_close();
    }

    async fn serve_on(&mut self, stream: &mut TcpStream) -> std::io::Result<()> {
        let greeting = self.session.greeting();
        stream.write_all(&greeting).await?;
        // This core's counters, written only by its connections and sessions (see
        // `server::metrics`): one plain store each, at each read and each write.
        self.session.core().metrics.count_sent(greeting.len());
        let max_packet_bytes = self.session.core().shared.config.max_packet_size_bytes as usize;
        loop {
            match self.read(stream).await {
                Ok(Arrived::Bytes(read)) => {
                    self.filled += read;
                    self.session.core().metrics.count_received(read);
                }
                Ok(Arrived::End) | Err(_) => return Ok(()),
                Ok(Arrived::Stopping) => {
                    self.close_after_delivery(stream, None).await;
                    return Ok(());
                }
            }
            if !self.serve_arrived(stream, max_packet_bytes).await? {
                return Ok(());
            }
            if let Some(subscription) = self.session.take_subscription() {
                let shared = self.session.core().shared.clone();
                if crate::server::replication::relay::copies_without_snapshot(
                    &shared,
                    &subscription,
                ) {
                    let taken = crate::server::durability::request_snapshot(&shared).await;
                    if let Err(reason) = taken {
                        tracing::warn!(%reason, "no snapshot for a replica's copy");
                    }
                }
                return self.become_relay(stream, *subscription);
            }
        }
    }

    /// A replica subscribed: its socket goes to a relay thread (a duplicate of the
    /// descriptor; this connection's own closes when it ends, the relay's stays open).
    fn become_relay(
        &self,
        stream: &TcpStream,
        mut subscription: crate::server::replication::Subscription,
    ) -> std::io::Result<()> {
        subscription.peer = stream
            .peer_addr()
            .map_or_else(|_| "?".to_owned(), |peer| peer.to_string());
        let socket = std::net::TcpStream::from(crate::server::os::sockets::duplicate(stream)?);
        socket.set_nonblocking(false)?;
        let shared = self.session.core().shared.clone();
        crate::server::replication::relay::spawn(shared, socket, subscription);
        Ok(())
    }

    /// Serves every complete packet in the read buffer, writes their replies and keeps the
    /// bytes of a partial packet at the start of the buffer. False when the framing was bad
    /// and the connection closed.
    #[inline]
    async fn serve_arrived(
        &mut self,
        stream: &mut TcpStream,
        max_packet_bytes: usize,
    ) -> std::io::Result<bool> {
        let Connection {
            session,
            lent,
            filled,
            ..
        } = &mut *self;
        let buffers = &mut lent.as_mut().expect("a read fills lent buffers").buffers;
        let Buffers {
            read: read_buf,
            out,
            packets,
        } = buffers;
        let (consumed, after_packets) = find_packets(read_buf, *filled, max_packet_bytes, packets);
        session.core().metrics.count_requests(packets.len());
        serve_packets(session, read_buf, packets, out, stream).await?;
        session.finish(out).await;
        let packet_end = match after_packets {
            AfterPackets::NeedMoreBytes { packet_end } => packet_end,
            AfterPackets::TooLarge { packet_bytes } => {
                tracing::warn!(
                    packet_len = packet_bytes,
                    max_packet_bytes,
                    "packet over max_packet_size; closing connection"
                );
                stream.write_all(out).await?;
                session.core().metrics.count_sent(out.len());
                out.clear();
                self.close_after_delivery(stream, Some(ERROR_LINGER)).await;
                return Ok(false);
            }
            AfterPackets::BadFrame(error) => {
                reply::encode_protocol_error(out, 0, session.core().schema_version(), &error);
                stream.write_all(out).await?;
                session.core().metrics.count_sent(out.len());
                out.clear();
                tracing::info!(%error, "bad frame; closing connection");
                self.close_after_delivery(stream, Some(ERROR_LINGER)).await;
                return Ok(false);
            }
        };
        if !out.is_empty() {
            stream.write_all(out).await?;
            session.core().metrics.count_sent(out.len());
            out.clear();
        }
        read_buf.copy_within(consumed..*filled, 0);
        *filled -= consumed;
        resize_read_buffer(read_buf, *filled, packet_end.map(|end| end - consumed));
        self.recount();
        Ok(true)
    }

    /// Waits for bytes from the client without holding buffers: the lent set goes back to
    /// the core while the socket has nothing (the bytes of a partial packet kept aside).
    fn read<'a>(
        &'a mut self,
        stream: &'a mut TcpStream,
    ) -> impl std::future::Future<Output = std::io::Result<Arrived>> + 'a {
        std::future::poll_fn(move |cx| self.poll_read(cx, stream))
    }

    fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        stream: &mut TcpStream,
    ) -> Poll<std::io::Result<Arrived>> {
        if self.connections.stopping() {
            return Poll::Ready(Ok(Arrived::Stopping));
        }
        let filled = self.filled;
        let lent = self.lent.get_or_insert_with(|| {
            let mut buffers = self.connections.lend();
            let counted_bytes = buffers.bytes();
            if !self.partial.is_empty() {
                buffers.read[..filled].copy_from_slice(&self.partial);
                self.connections.count_buffers(0, self.partial.capacity());
                self.partial = Vec::new();
            }
            Lent {
                buffers,
                counted_bytes,
            }
        });
        match Pin::new(&mut *stream).poll_read(cx, &mut lent.buffers.read[filled..]) {
            Poll::Ready(Ok(0)) => Poll::Ready(Ok(Arrived::End)),
            Poll::Ready(Ok(read)) => Poll::Ready(Ok(Arrived::Bytes(read))),
            Poll::Ready(Err(error)) => {
                tracing::debug!(%error, "connection read failed");
                Poll::Ready(Ok(Arrived::End))
            }
            Poll::Pending => {
                // Idle until the client sends more: keep the buffers only for a partial
                // packet too large to set aside cheaply (its bytes have arrived).
                if filled <= READ_CHUNK_BYTES / 2 {
                    if let Some(lent) = self.lent.take() {
                        self.session.shrink_buffers(SESSION_KEPT_BYTES_MAX);
                        let session_bytes = self.session.buffer_bytes();
                        self.connections
                            .count_buffers(session_bytes, self.session_counted_bytes);
                        self.session_counted_bytes = session_bytes;
                        self.partial = lent.buffers.read[..filled].to_vec();
                        self.connections.count_buffers(self.partial.capacity(), 0);
                        self.connections.give_back(lent.buffers, lent.counted_bytes);
                    }
                }
                self.connections.set_waker(self.slot, cx.waker());
                Poll::Pending
            }
        }
    }

    /// Brings the lent set's count up to date after a buffer changed size.
    fn recount(&mut self) {
        if let Some(lent) = &mut self.lent {
            let bytes = lent.buffers.bytes();
            if bytes != lent.counted_bytes {
                self.connections.count_buffers(bytes, lent.counted_bytes);
                lent.counted_bytes = bytes;
            }
        }
    }

    /// Ends the connection once the client has every reply byte: sends the end of the
    /// stream, then waits until the kernel has no unacknowledged byte left (closing with
    /// unread requests resets the connection, and a reset drops replies not yet
    /// delivered). Gives up after `linger`, or when the shutdown cuts connections.
    async fn close_after_delivery(&self, stream: &TcpStream, linger: Option<Duration>) {
        let _ = stream.shutdown(std::net::Shutdown::Write).await;
        let started = Instant::now();
        while os::sockets::unacknowledged_bytes(stream.as_raw_fd()) > 0 {
            if self.connections.cut.get() || linger.is_some_and(|linger| started.elapsed() > linger)
            {
                return;
            }
            glommio::timer::sleep(DELIVERY_POLL).await;
        }
    }
}

/// After the complete packets are handled and the rest moved to the start: grows the read
/// buffer when it is full and the next packet (ending at `packet_end`, when its prefix was
/// read) needs more room, by at most the bytes that arrived (so memory follows what the
/// client sent, not what it announced); shrinks it back to a chunk once a large packet is
/// done.
fn resize_read_buffer(read_buf: &mut Vec<u8>, filled: usize, packet_end: Option<usize>) {
    if filled == read_buf.len() {
        let wanted = packet_end.unwrap_or(read_buf.len() + 1);
        let grown = (read_buf.len() * 2).min(wanted).max(read_buf.len() + 1);
        read_buf.resize(grown, 0);
    } else if read_buf.len() > READ_CHUNK_BYTES && filled <= READ_CHUNK_BYTES / 2 {
        let mut chunk = vec![0; READ_CHUNK_BYTES];
        chunk[..filled].copy_from_slice(&read_buf[..filled]);
        *read_buf = chunk;
    }
}

/// Submits the packets in order and writes replies once they pass [`WRITE_FLUSH_BYTES`]; a
/// deferred request is run (awaited) where it stands, the packets after it submitted after.
#[inline]
async fn serve_packets(
    session: &mut Session,
    read_buf: &[u8],
    packets: &[Range<usize>],
    out: &mut Vec<u8>,
    stream: &mut TcpStream,
) -> std::io::Result<()> {
    let mut next = 0;
    while next < packets.len() {
        let Some((at, deferred)) = submit_until_stop(session, read_buf, packets, next, out) else {
            break;
        };
        if let Some(deferred) = deferred {
            let packet = &read_buf[packets[at].clone()];
            session.run_deferred(packet, deferred, out).await;
        }
        if out.len() >= WRITE_FLUSH_BYTES {
            session.finish(out).await;
            stream.write_all(out).await?;
            session.core().metrics.count_sent(out.len());
            out.clear();
        }
        next = at + 1;
    }
    Ok(())
}

/// Submits packets from `next` on without an await, until one must wait (a deferred
/// request, returned with its index) or the replies are due to be written. The run (a few
/// KiB of fetch-ahead state) lives only here, never across an await: so it is not part of
/// the connection's future, which every idle connection keeps.
#[inline]
fn submit_until_stop<'p>(
    session: &mut Session,
    read_buf: &'p [u8],
    packets: &[Range<usize>],
    next: usize,
    out: &mut Vec<u8>,
) -> Option<(usize, Option<Deferred<'p>>)> {
    let rest = &packets[next..];
    // Each packet's lookup is fetched a few packets before it runs, so the cache misses of
    // a pipelined run overlap (see `LookupPipeline`).
    let mut run = session.start_run();
    for (at, range) in rest.iter().enumerate() {
        session.prefetch_before(&mut run, at, |ahead| {
            rest.get(ahead).map(|range| &read_buf[range.clone()])
        });
        let packet = &read_buf[range.clone()];
        let deferred = session.submit_in(&mut run, at, packet, out);
        if deferred.is_some() || out.len() >= WRITE_FLUSH_BYTES {
            return Some((next + at, deferred));
        }
    }
    None
}

/// What follows the complete packets at the start of the read buffer.
#[derive(Debug, PartialEq)]
enum AfterPackets {
    /// Part of a packet, or nothing: read more. `packet_end` is where the next packet ends
    /// (from the start of the buffer), once its size prefix is in.
    NeedMoreBytes { packet_end: Option<usize> },
    /// A size prefix over `max_packet_size`: the connection closes.
    TooLarge { packet_bytes: usize },
    /// A size prefix that does not parse: the connection closes with this error.
    BadFrame(ProtocolError),
}

/// Puts the byte range of every complete packet in `read_buf[..filled]` into `packets`, in
/// order, and returns how many bytes they take with their size prefixes and what comes
/// after them. Allocates nothing for a packet announced but not arrived.
fn find_packets(
    read_buf: &[u8],
    filled: usize,
    max_packet_bytes: usize,
    packets: &mut Vec<Range<usize>>,
) -> (usize, AfterPackets) {
    packets.clear();
    let mut consumed = 0usize;
    loop {
        let after = match parse_frame_len(&read_buf[consumed..filled]) {
            FrameLen::Incomplete => AfterPackets::NeedMoreBytes { packet_end: None },
            FrameLen::Complete {
                prefix_len,
                packet_len,
            } if packet_len <= max_packet_bytes => {
                if filled - consumed >= prefix_len + packet_len {
                    let start = consumed + prefix_len;
                    packets.push(start..start + packet_len);
                    consumed = start + packet_len;
                    continue;
                }
                AfterPackets::NeedMoreBytes {
                    packet_end: Some(consumed + prefix_len + packet_len),
                }
            }
            FrameLen::Complete { packet_len, .. } => AfterPackets::TooLarge {
                packet_bytes: packet_len,
            },
            other => AfterPackets::BadFrame(
                other
                    .error()
                    .unwrap_or(ProtocolError::InvalidMsgpack("packet length")),
            ),
        };
        return (consumed, after);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announced_packet_allocates_nothing_before_its_bytes_arrive() {
        let mut read_buf = vec![0u8; READ_CHUNK_BYTES];
        // A 16 MiB packet announced in five bytes.
        read_buf[..5].copy_from_slice(&[0xce, 0x01, 0x00, 0x00, 0x00]);
        let mut packets = Vec::new();
        let (consumed, after) = find_packets(&read_buf, 5, 16 << 20, &mut packets);
        assert_eq!((consumed, packets.len()), (0, 0));
        assert_eq!(
            after,
            AfterPackets::NeedMoreBytes {
                packet_end: Some(5 + (16 << 20))
            }
        );
        resize_read_buffer(&mut read_buf, 5, Some(5 + (16 << 20)));
        assert_eq!(read_buf.len(), READ_CHUNK_BYTES);
    }

    #[test]
    fn the_read_buffer_grows_with_the_bytes_that_arrived_and_shrinks_after() {
        let packet_end = 5 + 1_000_000;
        let mut read_buf = vec![0u8; READ_CHUNK_BYTES];
        let mut filled = READ_CHUNK_BYTES;
        let mut lengths = Vec::new();
        while filled < packet_end {
            resize_read_buffer(&mut read_buf, filled, Some(packet_end));
            assert!(
                read_buf.len() <= 2 * filled,
                "{} for {filled}",
                read_buf.len()
            );
            lengths.push(read_buf.len());
            filled = read_buf.len();
        }
        assert_eq!(
            lengths,
            [131_072, 262_144, 524_288, packet_end],
            "doubling, capped at the packet's end"
        );
        // The packet is handled; 10 bytes of the next one remain.
        resize_read_buffer(&mut read_buf, 10, None);
        assert_eq!(read_buf.len(), READ_CHUNK_BYTES);
    }

    #[test]
    fn a_full_buffer_of_small_packets_keeps_its_size() {
        let mut read_buf = vec![0u8; READ_CHUNK_BYTES];
        resize_read_buffer(&mut read_buf, 100, None);
        assert_eq!(read_buf.len(), READ_CHUNK_BYTES);
        // A partial prefix filling the buffer cannot happen (prefixes are 9 bytes at most),
        // but a full buffer always grows.
        resize_read_buffer(&mut read_buf, READ_CHUNK_BYTES, None);
        assert!(read_buf.len() > READ_CHUNK_BYTES);
    }
}
