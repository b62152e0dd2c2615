//! What a tarn master and replica read from each other (`docs/replication.md`), the
//! replica's position file and the term file: the input's first byte picks the decoder, the
//! rest is its input.
//! Each must refuse what it cannot read without a panic; what it reads must encode back to
//! the same meaning (a packet decoded, encoded again and decoded gives the same value).

use tarn::protocol::client::split_server_frame;
use tarn::protocol::replication::{
    decode_streamed, decode_subscribe, decode_subscribed, encode_heartbeat, encode_snapshot_end,
    encode_snapshot_schema, encode_vclock_packet, encode_wal_batch, stream_type, Streamed,
    Subscribe, Subscribed,
};
use tarn::server::replication::position::Position;
use tarn::server::replication::term::TermRecord;

pub fn run(data: &[u8]) {
    let Some((&which, input)) = data.split_first() else {
        return;
    };
    match which % 5 {
        0 => subscribe(input),
        1 => subscribed(input),
        2 => streamed(input),
        3 => position(input),
        _ => term(input),
    }
}

fn subscribe(body: &[u8]) {
    let Ok(decoded) = decode_subscribe(body) else {
        return;
    };
    let mut packet = Vec::new();
    decoded.encode(1, &mut packet);
    let (whole, _) = split_server_frame(&packet).unwrap().unwrap();
    let (_, again) = tarn::protocol::decode_header(whole).expect("our header decodes");
    let again: Subscribe<'_> = decode_subscribe(again).expect("our body decodes");
    assert_eq!(again, decoded);
}

fn subscribed(packet: &[u8]) {
    let Ok(Ok(decoded)) = decode_subscribed(packet) else {
        return;
    };
    let mut out = Vec::new();
    decoded.encode(1, &mut out);
    let (whole, _) = split_server_frame(&out).unwrap().unwrap();
    let again: Subscribed<'_> = decode_subscribed(whole)
        .expect("ours decodes")
        .expect("no error");
    assert_eq!(again, decoded);
}

fn streamed(packet: &[u8]) {
    let Ok(decoded) = decode_streamed(packet) else {
        return;
    };
    let mut out = Vec::new();
    match &decoded {
        Streamed::SnapshotEnd { shard, lsn } => encode_snapshot_end(1, *shard, *lsn, &mut out),
        Streamed::WalBatch { shard, batch } => encode_wal_batch(1, *shard, 1, batch, &mut out),
        Streamed::SnapshotSchema { shard, schema } => {
            encode_snapshot_schema(1, *shard, schema, &mut out)
        }
        Streamed::Heartbeat { vclock, term } => encode_heartbeat(1, vclock, *term, &mut out),
        Streamed::Ack { vclock } => encode_vclock_packet(stream_type::ACK, 1, vclock, &mut out),
        Streamed::SnapshotTuples { .. } | Streamed::Error { .. } => return,
    }
    let (whole, _) = split_server_frame(&out).unwrap().unwrap();
    assert_eq!(decode_streamed(whole).expect("ours decodes"), decoded);
}

fn position(text: &[u8]) {
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    if let Ok(position) = Position::decode(text) {
        assert!(!position.applied.is_empty());
        assert_eq!(position.vclock().len(), position.applied.len());
    }
}

fn term(text: &[u8]) {
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    if let Ok(record) = TermRecord::decode(text) {
        assert!(record.term >= 1 && record.led <= record.term);
    }
}
