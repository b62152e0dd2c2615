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
        loop {
            let mut consumed = 0usize;
            loop {
                match parse_frame_len(&read_buf[consumed..filled]) {
                    FrameLen::Incomplete => break,
                    FrameLen::Complete {
                        prefix_len,
                        packet_len,
                    } if packet_len <= max_packet_bytes => {
                        if filled - consumed < prefix_len + packet_len {
                            if read_buf.len() < prefix_len + packet_len {
                                read_buf.resize(prefix_len + packet_len, 0);
                            }
                            break;
                        }
                        let start = consumed + prefix_len;
                        let packet = &read_buf[start..start + packet_len];
                        self.session.submit(packet, &mut out).await;
                        consumed = start + packet_len;
                        if out.len() >= WRITE_FLUSH_BYTES {
                            self.session.finish(&mut out).await;
                            stream.write_all(&out).await?;
                            out.clear();
                        }
                    }
                    FrameLen::Complete { packet_len, .. } => {
                        tracing::warn!(
                            packet_len,
                            max_packet_bytes,
                            "packet over max_packet_size; closing connection"
                        );
                        self.session.finish(&mut out).await;
                        stream.write_all(&out).await?;
                        return Ok(());
                    }
                    other => {
                        let error = other
                            .error()
                            .unwrap_or(ProtocolError::InvalidMsgpack("packet length"));
                        self.session.finish(&mut out).await;
                        reply::encode_protocol_error(&mut out, 0, SCHEMA_VERSION, &error);
                        stream.write_all(&out).await?;
                        tracing::info!(%error, "bad frame; closing connection");
                        return Ok(());
                    }
                }
            }
            self.session.finish(&mut out).await;
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
