//! The socket calls std and glommio offer no safe form of: handing a descriptor to glommio,
//! duplicating a glommio stream's, shutting one down, asking how much of what was written
//! the peer has not acknowledged.

use glommio::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};

/// The listening socket `socket` as glommio's listener, which from now on owns it.
pub fn into_glommio_listener(socket: socket2::Socket) -> TcpListener {
    // SAFETY: the descriptor is open and owned by `socket`, which gives it up here, so the
    // listener is its only owner.
    unsafe { TcpListener::from_raw_fd(socket.into_raw_fd()) }
}

/// The connected TCP socket `socket` as glommio's stream, which from now on owns it.
pub fn into_glommio_stream(socket: OwnedFd) -> TcpStream {
    // SAFETY: the descriptor is open and owned by `socket`, which gives it up here, so the
    // stream is its only owner.
    unsafe { TcpStream::from_raw_fd(socket.into_raw_fd()) }
}

/// A duplicate of `stream`'s descriptor (glommio's stream cannot give up its own).
pub fn duplicate(stream: &TcpStream) -> std::io::Result<OwnedFd> {
    // SAFETY: the descriptor is the stream's, open while `stream` is borrowed, which
    // outlives the borrowed descriptor (it lives only for this call).
    unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) }.try_clone_to_owned()
}

/// shutdown(2) both ways: the socket's reads and writes end with an error, whoever holds
/// it. `socket` must be open (an unrelated descriptor with that number would be shut down
/// instead, which is a logic error but touches no memory).
pub fn shut_down(socket: RawFd) {
    // SAFETY: shutdown(2) takes a descriptor number and no pointer; it touches no memory.
    unsafe { libc::shutdown(socket, libc::SHUT_RDWR) };
}

/// Bytes written to the socket that the peer has not acknowledged yet (0 if unknown).
pub fn unacknowledged_bytes(socket: RawFd) -> usize {
    let mut bytes: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ for sockets) writes one int through the pointer, which
    // points at `bytes`.
    let result = unsafe { libc::ioctl(socket, libc::TIOCOUTQ, &mut bytes) };
    if result < 0 {
        return 0;
    }
    usize::try_from(bytes).unwrap_or(0)
}
