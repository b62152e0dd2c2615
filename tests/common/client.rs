//! A minimal blocking IPROTO client for integration tests: greeting, send, read replies.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use tarn::protocol::client::split_server_frame;

pub struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut greeting = [0u8; 128];
        stream.read_exact(&mut greeting).expect("greeting");
        assert!(greeting.starts_with(b"Tarantool 2.11.1 (Binary) "));
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Reads one reply packet; `None` when the connection is closed.
    pub fn read_packet(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Ok(Some((packet, used))) = split_server_frame(&self.buf) {
                let packet = packet.to_vec();
                self.buf.drain(..used);
                return Some(packet);
            }
            let mut chunk = [0u8; 65536];
            let read = self.stream.read(&mut chunk).ok()?;
            if read == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..read]);
        }
    }
}
