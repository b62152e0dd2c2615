//! A space's next definition, prepared while the space serves (`docs/ddl.md`, step 4).
//!
//! The indexes it adds are built by a walk over the primary index, a bounded step at a
//! time, each tuple checked against the new format on the way; between the steps every
//! write goes to the indexes being built as well (checked against them and the new format,
//! and refused where they refuse it, as Tarantool's build triggers do). Once the walk is
//! done the indexes hold every tuple of the space, and the switch to the new definition is
//! a swap that cannot fail.
//!
//! A write puts its tuple in the indexes being built whether or not the walk has passed its
//! key: the walk putting it again later finds it there, so no write needs to know where
//! the walk is. New non-unique TREE indexes are built by sorting instead
//! ([`sorted_build`]): the walk collects their keys, writes go to a log replayed once the
//! tree is filled. Tuples keep the field map they were built with; the space's map grows by
//! the new indexes' fields, and a tuple built before finds them by walking its array.
//!
//! Knows nothing of shards or of how the steps are scheduled: the caller (the DDL
//! coordinator) takes a step, serves requests, takes the next.

use super::{indexed_fields, Space, SpaceDef, NEXT_INSTANCE};
use crate::storage::error::{Result, StorageError};
use crate::storage::index::{Index, IndexDef, IndexKind};
use crate::storage::key::{KeyBuf, SearchKeyBuf};
use crate::storage::range::IteratorType;
use crate::storage::tuple::{SpaceFormat, Tuple, MAX_FIELD_SLOTS};
use smallvec::SmallVec;
use sorted_build::SortedBuilds;

mod sorted_build;

/// A definition being prepared (see the module doc).
pub(super) struct Redefinition {
    /// The definition the space switches to.
    def: SpaceDef,
    /// The new format, when its rules differ from the space's: every tuple is checked
    /// against it.
    format: Option<SpaceFormat>,
    /// The indexes `def` adds, or redefines with other parts; hidden from reads until the
    /// switch.
    pub(super) building: Vec<Index>,
    /// The indexes of `building` built by sorting, until they are (see [`sorted_build`]):
    /// writes do not go to them but to its log.
    sorted: Option<Box<SortedBuilds>>,
    /// The primary key (a MessagePack array) of the last tuple the walk took; `None`
    /// before its first step.
    walked_to: Option<Vec<u8>>,
    /// Whether the walk has taken every tuple, and whether everything is built.
    walked: bool,
    done: bool,
    /// What made the new definition impossible outside a step (a tuple put back by an
    /// undo that a new unique index already holds another tuple under), for the next step
    /// to answer.
    failure: Option<StorageError>,
    /// The tuples of a step, and a key being built: kept, so that steps do not allocate.
    batch: Vec<Tuple>,
    scratch: SearchKeyBuf,
}

/// A tuple's keys in the indexes being built: its own, and the replaced tuple's where it
/// differs (to take out first).
pub(super) type BuildKeys = SmallVec<[(KeyBuf, Option<KeyBuf>); 2]>;

/// Whether `a` and `b` order and constrain the same tuples the same way: an index of one
/// serves as the other (their names and ids aside).
fn same_rules(a: &IndexDef, b: &IndexDef) -> bool {
    a.id == b.id && a.kind == b.kind && a.unique == b.unique && a.key_def == b.key_def
}

/// Whether every tuple one format admits the other admits too, in both directions (the
/// field names aside, which no tuple is checked against).
fn same_format_rules(a: &SpaceFormat, b: &SpaceFormat) -> bool {
    a.exact_field_count == b.exact_field_count
        && a.fields.len() == b.fields.len()
        && a.fields
            .iter()
            .zip(&b.fields)
            .all(|(a, b)| a.field_type == b.field_type && a.is_nullable == b.is_nullable)
}

impl Space {
    /// Starts redefining this space as `def` while it serves (see the module doc).
    /// `Ok(false)`, nothing started, when the change cannot be made so: a primary index
    /// that changes, or is a HASH (no order to walk), needs every index rebuilt at once
    /// ([`Space::redefined`]). `def` is refused as a new space's would be.
    pub fn prepare_redefinition(&mut self, def: SpaceDef) -> Result<bool> {
        debug_assert_eq!(def.id, self.id, "a space is redefined under its own id");
        debug_assert!(self.redefinition.is_none(), "one redefinition at a time");
        drop(Space::new(def.clone(), self.quota.clone())?);
        let primary = &self.indexes[0].def;
        if primary.kind == IndexKind::Hash || !same_rules(primary, &def.indexes[0]) {
            return Ok(false);
        }
        let Some(field_map) = self.field_map.extended(indexed_fields(&def.indexes)) else {
            return Err(StorageError::IllegalParams(
                format!(
                    "space '{}': more than {MAX_FIELD_SLOTS} fields are indexed",
                    def.name
                )
                .into(),
            ));
        };
        // Grown now, for the indexes being built; tuples built from here on have every slot.
        self.field_map = field_map;
        let primary_key_def = primary.key_def.clone();
        let building: Vec<Index> = def.indexes[1..]
            .iter()
            .filter(|new| !self.indexes.iter().any(|old| same_rules(&old.def, new)))
            .map(|new| Index::new(new.clone(), &primary_key_def, &self.field_map, &self.slab))
            .collect();
        let format = (!same_format_rules(&self.format, &def.format)).then(|| def.format.clone());
        // Nothing to build or check (a drop, a rename): ready at once.
        let done = building.is_empty() && format.is_none();
        let sorted = SortedBuilds::new(
            building
                .iter()
                .enumerate()
                .filter(|(_, index)| !index.def.unique && index.loads_sorted())
                .map(|(position, _)| position),
            self.len(),
        );
        self.redefinition = Some(Box::new(Redefinition {
            def,
            format,
            building,
            sorted,
            walked_to: None,
            walked: done,
            done,
            failure: None,
            batch: Vec::new(),
            scratch: SearchKeyBuf::new(),
        }));
        Ok(true)
    }

    /// Redefines this space as `def` in one step, as recovery and start-up do (nothing is
    /// served meanwhile): where [`Space::prepare_redefinition`] applies, only the indexes
    /// `def` adds are built, each by one sort as recovery builds an index, and the tuples and
    /// kept indexes stay as they are; otherwise the whole space is rebuilt
    /// ([`Space::redefined`]). A refused change leaves the space as it was.
    pub fn redefine_at_once(&mut self, def: SpaceDef) -> Result<()> {
        if !self.prepare_redefinition(def.clone())? {
            *self = self.redefined(def)?;
            return Ok(());
        }
        if let Err(error) = self.build_prepared_at_once() {
            self.cancel_redefinition();
            return Err(error);
        }
        let finished = self.finish_redefinition();
        debug_assert!(finished, "a redefinition built at once is ready");
        Ok(())
    }

    fn build_prepared_at_once(&mut self) -> Result<()> {
        let Some(mut redefinition) = self.redefinition.take() else {
            return Ok(());
        };
        let built = self.build_at_once(&mut redefinition);
        self.redefinition = Some(redefinition);
        self.settle_index_bytes();
        built?;
        if self.quota.is_over_limit() {
            return Err(self.out_of_memory(self.index_bytes));
        }
        Ok(())
    }

    fn build_at_once(&self, redefinition: &mut Redefinition) -> Result<()> {
        let tuples: Vec<Tuple> = self.indexes[0]
            .entries()
            .map(|(_, tuple)| tuple.to_tuple())
            .collect();
        if let Some(format) = &redefinition.format {
            for tuple in &tuples {
                format.check_tuple(&self.field_map, tuple.data())?;
            }
        }
        for index in &mut redefinition.building {
            index.bulk_build(&tuples, &self.field_map, &self.format, &self.name)?;
        }
        redefinition.sorted = None;
        (redefinition.walked, redefinition.done) = (true, true);
        Ok(())
    }

    /// Takes the walk of the prepared redefinition up to `tuples` tuples further. `Ok(true)`
    /// once every tuple has been taken; an error (a tuple the new format or a new index
    /// refuses, a duplicate in a new unique index, the quota passed) means the definition
    /// cannot be had: the caller cancels it.
    pub fn redefinition_step(&mut self, tuples: usize) -> Result<bool> {
        let Some(mut redefinition) = self.redefinition.take() else {
            return Ok(true);
        };
        let walked = self.walk(&mut redefinition, tuples);
        self.redefinition = Some(redefinition);
        self.settle_index_bytes();
        let done = walked?;
        if self.quota.is_over_limit() {
            return Err(self.out_of_memory(self.index_bytes));
        }
        Ok(done)
    }

    fn walk(&self, redefinition: &mut Redefinition, tuples: usize) -> Result<bool> {
        if let Some(failure) = redefinition.failure.take() {
            return Err(failure);
        }
        if redefinition.done {
            return Ok(true);
        }
        if redefinition.walked {
            let Redefinition {
                sorted, building, ..
            } = redefinition;
            if let Some(builds) = sorted {
                let field_map_and_format = (&self.field_map, &self.format);
                if !builds.step(building, field_map_and_format, tuples)? {
                    return Ok(false);
                }
            }
            *sorted = None;
            redefinition.done = true;
            return Ok(true);
        }
        let mut batch = std::mem::take(&mut redefinition.batch);
        batch.clear();
        batch.extend(
            match &redefinition.walked_to {
                None => self.select(0, IteratorType::All as u32, &[0x90])?,
                Some(key) => self.select(0, IteratorType::Gt as u32, key)?,
            }
            .take(tuples)
            .map(|(_, tuple)| tuple.to_tuple()),
        );
        let walked = batch
            .iter()
            .try_for_each(|tuple| self.put_walked(redefinition, tuple));
        if let Some(last) = batch.last() {
            let key = redefinition.walked_to.get_or_insert_with(Vec::new);
            key.clear();
            self.write_primary_key(last, key);
        }
        redefinition.walked = batch.len() < tuples;
        redefinition.done = redefinition.walked && redefinition.sorted.is_none();
        batch.clear();
        redefinition.batch = batch;
        walked.map(|()| redefinition.done)
    }

    /// Puts a tuple the walk took in every index being built, checked as a write of it
    /// would be ([`Space::redefinition_keys`], without a key to take out: it replaces
    /// itself).
    fn put_walked(&self, redefinition: &mut Redefinition, tuple: &Tuple) -> Result<()> {
        if let Some(format) = &redefinition.format {
            format.check_tuple(&self.field_map, tuple.data())?;
        }
        let Redefinition {
            building,
            scratch,
            sorted,
            ..
        } = redefinition;
        for (position, index) in building.iter_mut().enumerate() {
            scratch.clear();
            index.encode_tuple_key(tuple, &self.field_map, &self.format, scratch)?;
            if let Some(builds) = sorted.as_mut().filter(|builds| builds.builds(position)) {
                builds.collect(position, scratch, tuple);
                continue;
            }
            if index.def.unique {
                if let Some(holder) = index.get(scratch) {
                    if !Tuple::ptr_eq(&holder, tuple) {
                        return Err(self.duplicate(index, &holder, tuple));
                    }
                }
            }
            index.insert_slice(scratch, tuple.clone());
        }
        Ok(())
    }

    /// Drops the prepared redefinition: the space stays as it was (its field map keeps
    /// the slots it grew, which no reader minds).
    pub fn cancel_redefinition(&mut self) {
        self.redefinition = None;
        self.settle_index_bytes();
    }

    /// Whether a redefinition is prepared and its walk done: [`Space::finish_redefinition`]
    /// would switch to it.
    pub fn redefinition_ready(&self) -> bool {
        self.redefinition
            .as_ref()
            .is_some_and(|r| r.done && r.failure.is_none())
    }

    /// Switches to the prepared definition (see [`Space::redefinition_ready`]): the kept
    /// indexes stay as they are, the built ones join them, the dropped ones are freed, and
    /// the space becomes a new [`Space::instance`]. Nothing when none is ready.
    pub fn finish_redefinition(&mut self) -> bool {
        if !self.redefinition_ready() {
            return false;
        }
        let Some(redefinition) = self.redefinition.take() else {
            return false;
        };
        let Redefinition { def, building, .. } = *redefinition;
        let mut old: Vec<Option<Index>> = std::mem::take(&mut self.indexes)
            .into_iter()
            .map(Some)
            .collect();
        let mut built: Vec<Option<Index>> = building.into_iter().map(Some).collect();
        let take = |slots: &mut Vec<Option<Index>>, new: &IndexDef| {
            slots
                .iter_mut()
                .find(|slot| {
                    slot.as_ref()
                        .is_some_and(|index| same_rules(&index.def, new))
                })
                .and_then(Option::take)
        };
        for new in &def.indexes {
            let found = take(&mut old, new).or_else(|| take(&mut built, new));
            debug_assert!(found.is_some(), "every index of the definition is at hand");
            if let Some(mut index) = found {
                index.def = new.clone();
                self.indexes.push(index);
            }
        }
        drop(old);
        self.double_fields = super::double_fields(&def.format, &def.indexes);
        self.name = def.name;
        self.format = def.format;
        self.instance = NEXT_INSTANCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.settle_index_bytes();
        true
    }

    /// Checks `new`, about to replace `old`, against the prepared redefinition: the new
    /// format, and each index being built (its key, and a unique index's other holder of
    /// it). The keys to change there; nothing is changed yet.
    pub(super) fn redefinition_keys(
        &self,
        redefinition: &Redefinition,
        new: &Tuple,
        old: Option<&Tuple>,
    ) -> Result<BuildKeys> {
        if let Some(format) = &redefinition.format {
            format.check_tuple(&self.field_map, new.data())?;
        }
        redefinition
            .building
            .iter()
            .map(|index| {
                let mut key = KeyBuf::new();
                index.encode_tuple_key(new, &self.field_map, &self.format, &mut key)?;
                if index.def.unique {
                    if let Some(holder) = index.get(&key) {
                        if !old.is_some_and(|old| Tuple::ptr_eq(old, &holder)) {
                            return Err(self.duplicate(index, &holder, new));
                        }
                    }
                }
                // An old tuple whose key does not encode was never put in (a write or the
                // walk would have been refused).
                let old_key = old.and_then(|old| {
                    let mut old_key = KeyBuf::new();
                    index
                        .encode_tuple_key(old, &self.field_map, &self.format, &mut old_key)
                        .ok()
                        .filter(|_| old_key != key)
                        .map(|()| old_key)
                });
                Ok((key, old_key))
            })
            .collect()
    }

    /// Takes `tuple` out of the indexes being built, where it is.
    pub(super) fn remove_from_redefinition(&mut self, tuple: &Tuple) {
        let Space {
            redefinition,
            field_map,
            format,
            ..
        } = self;
        let Some(redefinition) = redefinition else {
            return;
        };
        if let Some(builds) = &mut redefinition.sorted {
            builds.log(Some(tuple), None);
        }
        for (position, index) in redefinition.building.iter_mut().enumerate() {
            if redefinition
                .sorted
                .as_ref()
                .is_some_and(|builds| builds.builds(position))
            {
                continue;
            }
            let mut key = KeyBuf::new();
            if index
                .encode_tuple_key(tuple, field_map, format, &mut key)
                .is_ok()
            {
                remove_if_held(index, &key, tuple);
            }
        }
    }

    /// Puts back in the indexes being built a tuple an undo returns to the space; one they
    /// refuse now fails the redefinition at its next step.
    pub(super) fn put_back_in_redefinition(&mut self, tuple: &Tuple) {
        let Some(redefinition) = self.redefinition.take() else {
            return;
        };
        let mut redefinition = redefinition;
        match self.redefinition_keys(&redefinition, tuple, Some(tuple)) {
            Ok(keys) => redefinition.put(keys, tuple, None),
            Err(error) => {
                redefinition.failure.get_or_insert(error);
            }
        }
        self.redefinition = Some(redefinition);
    }
}

impl Redefinition {
    /// Puts `tuple` in every index being built under `keys` ([`Space::redefinition_keys`]),
    /// taking out `old`, the tuple it replaces.
    /// Indexes built by sorting get the write in their log instead.
    pub(super) fn put(&mut self, keys: BuildKeys, tuple: &Tuple, old: Option<&Tuple>) {
        if let Some(builds) = &mut self.sorted {
            builds.log(old, Some(tuple));
        }
        let building = self.building.iter_mut().zip(keys).enumerate();
        for (position, (index, (key, old_key))) in building {
            if self
                .sorted
                .as_ref()
                .is_some_and(|builds| builds.builds(position))
            {
                continue;
            }
            if let (Some(old_key), Some(old)) = (old_key, old) {
                remove_if_held(index, &old_key, old);
            }
            index.insert(key, tuple.clone());
        }
    }

    /// Empties the indexes being built, as a truncate empties the space; a build by
    /// sorting starts over (the walk with it).
    pub(super) fn clear(&mut self) {
        for index in &mut self.building {
            index.clear();
        }
        if let Some(builds) = &mut self.sorted {
            builds.reset();
            self.walked_to = None;
            (self.walked, self.done) = (false, false);
        }
    }

    pub(super) fn allocated_bytes(&self) -> usize {
        self.building.iter().map(Index::allocated_bytes).sum()
    }
}

/// Takes `key` out of `index` if `tuple` holds it there. A tuple the walk has not reached
/// may share a new unique index's key with one a write put in (a duplicate the walk will
/// find): taking the key out for it would take the other tuple out.
pub(super) fn remove_if_held(index: &mut Index, key: &[u8], tuple: &Tuple) {
    if index
        .get(key)
        .is_some_and(|holder| Tuple::ptr_eq(&holder, tuple))
    {
        index.remove(key);
    }
}

#[cfg(test)]
#[path = "redefinition_tests.rs"]
mod tests;
