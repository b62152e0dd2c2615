//! One client connection over TCP: the greeting, the size-prefix framing and the read and
//! write buffers. What each packet means is the [`Session`]'s business.
//!
//! Every complete packet in the read buffer is submitted before any reply is awaited, so the
//! requests one read brings for other cores travel in one batch per core. Replies are
//! gathered in arrival order and written before more is read, so a client that does not read
//! gets backpressure instead of unbounded buffering.

use crate::protocol::frame::{parse_frame_len, FrameLen};
use crate::protocol::reply;
use crate::protocol::ProtocolError;
use crate::server::dispatch::Session;
use crate::server::schema::SCHEMA_VERSION;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use std::ops::Range;

/// Reads this much at a time; a larger packet grows the buffer up to `max_packet_size`.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Replies gathered past this size are written before more requests are handled.
const WRITE_FLUSH_BYTES: usize = 256 * 1024;

pub struct Connection {
    session: Session,
}

impl Connection {
    pub fn new(session: Session) -> Connection {
        Connection { session }
    }

    pub async fn serve(mut self, mut stream: TcpStream) -> std::io::Result<()> {
        stream.write_all(&self.session.greeting()).await?;
        let max_packet_bytes = self.session.core().shared.config.max_packet_size_bytes as usize;
        let mut read_buf = vec![0u8; READ_CHUNK_BYTES];
        let mut filled = 0usize;
        let mut out = Vec::with_capacity(READ_CHUNK_BYTES);
        let mut packets: Vec<Range<usize>> = Vec::new();
        loop {
            let (consumed, after_packets) =
                find_packets(&mut read_buf, filled, max_packet_bytes, &mut packets);
            // Each packet's lookup is fetched a few packets before it runs, so the cache
            // misses of a pipelined run overlap (see `LookupPipeline`).
            let mut run = self.session.start_run();
            for (at, range) in packets.iter().enumerate() {
                self.session.prefetch_before(&mut run, at, |ahead| {
                    packets.get(ahead).map(|range| &read_buf[range.clone()])
                });
                let packet = &read_buf[range.clone()];
                if let Some(deferred) = self.session.submit_in(&mut run, at, packet, &mut out) {
                    self.session.run_deferred(packet, deferred, &mut out).await;
                }
                if out.len() >= WRITE_FLUSH_BYTES {
                    self.session.finish(&mut out).await;
                    stream.write_all(&out).await?;
                    out.clear();
                }
            }
            self.session.finish(&mut out).await;
            match after_packets {
                AfterPackets::NeedMoreBytes => {}
                AfterPackets::TooLarge { packet_bytes } => {
                    tracing::warn!(
                        packet_len = packet_bytes,
                        max_packet_bytes,
                        "packet over max_packet_size; closing connection"
                    );
                    stream.write_all(&out).await?;
                    return Ok(());
                }
                AfterPackets::BadFrame(error) => {
                    reply::encode_protocol_error(&mut out, 0, SCHEMA_VERSION, &error);
                    stream.write_all(&out).await?;
                    tracing::info!(%error, "bad frame; closing connection");
                    return Ok(());
                }
            }
            if !out.is_empty() {
                stream.write_all(&out).await?;
                out.clear();
            }
            read_buf.copy_within(consumed..filled, 0);
            filled -= consumed;
            if filled == read_buf.len() {
                read_buf.resize(read_buf.len() * 2, 0);
            }
            let read = stream.read(&mut read_buf[filled..]).await?;
            if read == 0 {
                return Ok(());
            }
            filled += read;
        }
    }
}

/// What follows the complete packets at the start of the read buffer.
enum AfterPackets {
    /// Part of a packet, or nothing: read more.
    NeedMoreBytes,
    /// A size prefix over `max_packet_size`: the connection closes.
    TooLarge { packet_bytes: usize },
    /// A size prefix that does not parse: the connection closes with this error.
    BadFrame(ProtocolError),
}

/// Puts the byte range of every complete packet in `read_buf[..filled]` into `packets`, in
/// order, and returns how many bytes they take with their size prefixes and what comes
/// after them. Grows the buffer when the next packet will not fit in it.
fn find_packets(
    read_buf: &mut Vec<u8>,
    filled: usize,
    max_packet_bytes: usize,
    packets: &mut Vec<Range<usize>>,
) -> (usize, AfterPackets) {
    packets.clear();
    let mut consumed = 0usize;
    loop {
        let after = match parse_frame_len(&read_buf[consumed..filled]) {
            FrameLen::Incomplete => AfterPackets::NeedMoreBytes,
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
                if read_buf.len() < prefix_len + packet_len {
                    read_buf.resize(prefix_len + packet_len, 0);
                }
                AfterPackets::NeedMoreBytes
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
