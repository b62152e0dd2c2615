use super::*;
use crate::msgpack;
use crate::storage::key::SearchKeyBuf;
use crate::storage::{FieldType, KeyDef, KeyPart};

const SPREAD: u32 = 512;
const SINGLE: u32 = 513;
const SHARDS: usize = 4;

fn catalog(shard_count: usize) -> Catalog {
    let key = || Some(KeyDef::new([KeyPart::new(0, FieldType::Unsigned)]));
    Catalog::new(
        shard_count,
        [
            (SPREAD, Placement::All, key()),
            (SINGLE, Placement::Single, key()),
        ],
    )
}

fn key(id: u64) -> Vec<u8> {
    let mut key = vec![0x91];
    msgpack::write_uint(&mut key, id);
    key
}

fn owner_of(id: u64) -> usize {
    let mut encoded = SearchKeyBuf::new();
    KeyDef::new([KeyPart::new(0, FieldType::Unsigned)])
        .encode_search_key(&key(id), &mut encoded)
        .expect("encodes");
    shard_of_key(&encoded, SHARDS)
}

fn read(space_id: u32, index_id: u32, iterator: IteratorType, key: &[u8]) -> RequestTarget<'_> {
    RequestTarget::Read {
        space_id,
        index_id,
        iterator: iterator as u32,
        key,
    }
}

#[test]
fn a_point_request_goes_to_the_owner_of_its_key_and_runs_here_on_the_owner() {
    let catalog = catalog(SHARDS);
    for id in 0..64 {
        let (key, owner) = (key(id), owner_of(id));
        let other = (owner + 1) % SHARDS;
        let targets = [
            read(SPREAD, 0, IteratorType::Eq, &key),
            read(SPREAD, 0, IteratorType::Req, &key),
            RequestTarget::Key {
                space_id: SPREAD,
                index_id: 0,
                key: &key,
            },
            RequestTarget::Tuple {
                space_id: SPREAD,
                tuple: &key,
            },
        ];
        for target in &targets {
            assert_eq!(route(target, &catalog, owner), Destination::Here);
            assert_eq!(route(target, &catalog, other), Destination::Owner(owner));
        }
        let encoded = |buf: &mut SearchKeyBuf| {
            buf.extend_from_slice(&id.to_be_bytes());
            true
        };
        assert_eq!(
            route_by_primary_key(&catalog, SPREAD, other, encoded),
            Destination::Owner(owner)
        );
    }
}

#[test]
fn scans_of_spread_spaces_go_to_every_core_and_the_rest_where_its_space_is() {
    let catalog = catalog(SHARDS);
    let key = key(7);
    let every = Destination::EveryCore;
    assert_eq!(
        route(&read(SPREAD, 0, IteratorType::Ge, &key), &catalog, 1),
        every
    );
    assert_eq!(
        route(&read(SPREAD, 1, IteratorType::Eq, &key), &catalog, 1),
        every
    );
    // A point select whose key does not place scans (and reports the bad key there).
    assert_eq!(
        route(&read(SPREAD, 0, IteratorType::Eq, &[0x90]), &catalog, 1),
        every
    );
    assert_eq!(
        route(&read(9_999, 0, IteratorType::Eq, &key), &catalog, 1),
        every
    );
    assert_eq!(
        route(&read(SINGLE, 1, IteratorType::All, &key), &catalog, 1),
        Destination::Owner(0)
    );
    assert_eq!(
        route(&read(SINGLE, 1, IteratorType::All, &key), &catalog, 0),
        Destination::Here
    );
    assert_eq!(
        route(&read(281, 0, IteratorType::All, &key), &catalog, 3),
        Destination::Here
    );
    // A write whose key does not place, or by a secondary key, runs here.
    let broken = RequestTarget::Tuple {
        space_id: SPREAD,
        tuple: &[0x90],
    };
    assert_eq!(route(&broken, &catalog, 2), Destination::Here);
    let secondary = RequestTarget::Key {
        space_id: SPREAD,
        index_id: 1,
        key: &key,
    };
    assert_eq!(route(&secondary, &catalog, 2), Destination::Here);
    let single = RequestTarget::Key {
        space_id: SINGLE,
        index_id: 1,
        key: &key,
    };
    assert_eq!(route(&single, &catalog, 2), Destination::Owner(0));
    assert_eq!(
        route(&RequestTarget::Procedure, &catalog, 2),
        Destination::Here
    );
    assert_eq!(
        route_by_primary_key(&catalog, SPREAD, 2, |_| false),
        Destination::Here
    );
    let called = |_: &mut SearchKeyBuf| panic!("the key of a space on shard 0 is not needed");
    assert_eq!(
        route_by_primary_key(&catalog, SINGLE, 2, called),
        Destination::Owner(0)
    );
    assert_eq!(route_to_every_core(&catalog), Destination::EveryCore);
}

#[test]
fn on_one_core_everything_runs_here() {
    let catalog = catalog(1);
    let key = key(7);
    assert_eq!(
        route(&read(SPREAD, 0, IteratorType::Ge, &key), &catalog, 0),
        Destination::Here
    );
    assert_eq!(
        route(&read(SINGLE, 0, IteratorType::Eq, &key), &catalog, 0),
        Destination::Here
    );
    assert_eq!(route_to_every_core(&catalog), Destination::Here);
    assert_eq!(
        route_by_primary_key(&catalog, SPREAD, 0, |_| true),
        Destination::Here
    );
}

#[test]
fn a_row_is_on_shard_0_when_its_space_is_single_and_by_key_otherwise() {
    let encoded = 5u64.to_be_bytes();
    assert_eq!(shard_of_row(Placement::Single, &encoded, SHARDS), 0);
    assert_eq!(
        shard_of_row(Placement::All, &encoded, SHARDS),
        shard_of_key(&encoded, SHARDS)
    );
}
