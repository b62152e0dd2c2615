//! The schema record's rows (`schema.bin`, read at every start): the input is one space's
//! recorded rows, a `_space` row and its `_index` rows, or anything else.
//! `schema_change::decode_space_rows` must refuse what it cannot read without a panic; a
//! definition it reads must be one storage takes or refuses with an error, and planning the
//! same rows against themselves changes nothing, while planning them against a config
//! without the space refuses with the space's id, or drops it on the operator's word.

use tarn::server::schema_change::{decode_space_rows, plan};
use tarn::storage::Engine;

pub fn run(data: &[u8]) {
    let Ok(def) = decode_space_rows(data) else {
        return;
    };
    let id = def.id;
    let mut engine = Engine::new(1 << 26);
    let _ = engine.create_space(def.clone());
    let recorded = [(id, data.to_vec())];
    let same = [(id, def.name.to_string(), data.to_vec(), def)];
    let changes = plan(&recorded, &same, false).expect("rows planned against themselves");
    assert!(changes.is_empty(), "the same rows are no change");
    let refusal = plan(&recorded, &[], false).expect_err("a space the config lacks is refused");
    assert!(refusal.starts_with(&format!("space {id} ")), "{refusal}");
    let dropped = plan(&recorded, &[], true).expect("dropped on the operator's word");
    assert!(dropped.len() == 1 && dropped[0].wanted.is_none());
}
