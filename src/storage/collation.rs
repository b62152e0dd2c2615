//! The ICU collations `unicode` and `unicode_ci` as sort keys: byte strings whose `memcmp`
//! order is the collation's order, and which are equal exactly when the collation calls the
//! strings equal. [`key`](super::key) encodes a collated string part as its sort key, so
//! TREE order, HASH equality and placement all follow the collation without a comparator.
//!
//! Tarantool builds both from ICU's root locale (`ucol_open("")`, `src/lib/coll/coll.c`)
//! with every attribute at its default but the strength: `unicode` is tertiary (case and
//! accents count, in that order of weight), `unicode_ci` primary (`"a"` = `"A"` = `"ä"`).
//! Root's defaults are alternate=non-ignorable (spaces and punctuation are base characters
//! that sort before digits and letters), no numeric ordering, no case level, case_first off.
//!
//! The collator is ICU4X's (`icu_collator`), whose sort keys follow ICU4C's algorithm, with
//! its compiled-in CLDR root data. Tarantool 2.6 on Debian 12 links ICU 72 (CLDR 42,
//! Unicode 15.0); icu_collator 2.4 carries a later CLDR and Unicode. They agree on every
//! string of `docs/tarantool-reference.md` (section "Collations"), and can differ on
//! characters assigned after Unicode 15.0 (ICU 72 orders such a code point as unassigned,
//! by code point after all scripts; ICU4X gives it its script's place) and on canonically
//! equivalent strings that are not in FCD form (ICU4C's root does not normalize them,
//! ICU4X always does).
//!
//! Invalid UTF-8 is read as Tarantool's ICU reads it: each maximal ill-formed subsequence is
//! one U+FFFD, so `"\xff"` = `"\xc3"` = `"\u{FFFD}"`. U+0000 is ignorable, as in ICU:
//! `"a\0b"` = `"ab"`.
//!
//! Sort keys are not stored: indexes are rebuilt from tuples at start-up. But placement
//! hashes the encoded primary key, so a crate update that changes sort keys moves the rows
//! of a spread space whose primary key has a collated part; `pinned_sort_keys` below fails
//! on such an update. Knows nothing of key layouts, indexes or spaces.

use icu_collator::options::{AlternateHandling, CollatorOptions, Strength};
use icu_collator::CollatorBorrowed;
use smallvec::SmallVec;
use std::sync::LazyLock;

/// The ICU strengths tarn's collations use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcuStrength {
    /// `unicode`: base letters, then accents, then case.
    Tertiary,
    /// `unicode_ci`: base letters only.
    Primary,
}

/// A sort key being built: most strings' keys fit on the stack.
pub type SortKeyBuf = SmallVec<[u8; 64]>;

static UNICODE: LazyLock<CollatorBorrowed<'static>> =
    LazyLock::new(|| root_collator(Strength::Tertiary));
static UNICODE_CI: LazyLock<CollatorBorrowed<'static>> =
    LazyLock::new(|| root_collator(Strength::Primary));

fn root_collator(strength: Strength) -> CollatorBorrowed<'static> {
    let mut options = CollatorOptions::default();
    options.strength = Some(strength);
    options.alternate_handling = Some(AlternateHandling::NonIgnorable);
    // The root locale with compiled data cannot be missing: an error here is a build of the
    // crate without its data, not something a request or a file can cause.
    CollatorBorrowed::try_new(Default::default(), options)
        .expect("icu_collator's compiled data holds the root collation")
}

/// Appends the sort key of `text` (UTF-8, possibly ill-formed) at `strength` to `out`.
/// The key holds no zero byte (ICU reserves 0x00; levels are separated by 0x01).
pub fn write_sort_key(strength: IcuStrength, text: &[u8], out: &mut SortKeyBuf) {
    let collator = match strength {
        IcuStrength::Tertiary => &*UNICODE,
        IcuStrength::Primary => &*UNICODE_CI,
    };
    let Ok(()) = collator.write_sort_key_utf8_to(text, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering;

    fn key(strength: IcuStrength, text: &[u8]) -> SortKeyBuf {
        let mut out = SortKeyBuf::new();
        write_sort_key(strength, text, &mut out);
        out
    }

    /// Strings ordered as Tarantool 2.6.0 (ICU 72) orders them in a TREE index with the
    /// collation, `=` marking a string equal to the one before (docs/tarantool-reference.md,
    /// "Collations"; observed 2026-12-02).
    const UNICODE_ORDER: &str = "< | = 00 | < efbfbe | < 09 | < 20 | < 2020 | < 2d | < 2d6162 | < 2e2e2e | < e280a6 | < 27 | < 22 | < 40 | < 23 | < 7e | < f09f9880 | < 31 | = d9a1 | < c2bd | < 3130 | < 32 | < 61 | = 6100 | < 41 | < c3a1 | < c3a0 | < e284ab | = c385 | = 41cc8a | < c3a4 | < c384 | < 612062 | < 615f62 | < 612d62 | < 612e62 | < 6131 | < 613130 | < 6132 | < 6161 | < 6162 | = 610062 | < 6142 | < 4162 | < 61622d | < 6165 | < c3a6 | < c386 | < 61ff | = 61c3 | < 62 | < 42 | < 64c5be | < c786 | < 65cc81 | = c3a9 | < c389 | < 6666 | < efac80 | < 6669 | < efac81 | < 4649 | < 69 | < c4b0 | < c4b1 | < 6e | < c3b1 | < 6f | < c3b8 | < 6f65 | < c593 | < 73 | < 7373 | < 5353 | < c39f | < e1ba9e | < 78cc81cc88 | < 78cc88cc81 | < c3bf | < 7a | < 5a | < cf89 | < cea9 | < d18f | < d0af | < ed959c | < e38182 | < e382a2 | < efbdb1 | < e4b8ad | < e69687 | < e697a5e69cac | < efbfbd | = ff | = c3 | < eda080 | < efbfbf";
    const UNICODE_CI_ORDER: &str = "< | = 00 | < efbfbe | < 09 | < 20 | < 2020 | < 2d | < 2d6162 | < e280a6 | = 2e2e2e | < 27 | < 22 | < 40 | < 23 | < 7e | < f09f9880 | < 31 | = d9a1 | < c2bd | < 3130 | < 32 | < 61 | = 41 | = c3a4 | = c384 | = c3a1 | = c3a0 | = 6100 | = e284ab | = c385 | = 41cc8a | < 612062 | < 615f62 | < 612d62 | < 612e62 | < 6131 | < 613130 | < 6132 | < 6161 | < 6162 | = 4162 | = 6142 | = 610062 | < 61622d | < 6165 | = c3a6 | = c386 | < 61ff | = 61c3 | < 62 | = 42 | < c786 | = 64c5be | < 65cc81 | = c3a9 | = c389 | < efac80 | = 6666 | < efac81 | = 6669 | = 4649 | < 69 | = c4b0 | < c4b1 | < c3b1 | = 6e | < c3b8 | = 6f | < c593 | = 6f65 | < 73 | < c39f | = 7373 | = 5353 | = e1ba9e | < 78cc88cc81 | = 78cc81cc88 | < c3bf | < 7a | = 5a | < cea9 | = cf89 | < d0af | = d18f | < ed959c | < efbdb1 | = e382a2 | = e38182 | < e4b8ad | < e69687 | < e697a5e69cac | < efbfbd | = ff | = c3 | < eda080 | < efbfbf";

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&text[at..at + 2], 16).unwrap())
            .collect()
    }

    fn check_order(strength: IcuStrength, observed: &str) {
        let mut previous: Option<(Vec<u8>, SortKeyBuf)> = None;
        let mut mismatches = Vec::new();
        for entry in observed.split(" | ") {
            let (relation, text) = entry.split_at(1);
            let text = unhex(text.trim());
            let this = key(strength, &text);
            if let Some((before, before_key)) = &previous {
                let want = if relation == "=" {
                    Ordering::Equal
                } else {
                    Ordering::Less
                };
                let got = before_key.cmp(&this);
                if got != want {
                    mismatches.push(format!(
                        "{:?} vs {:?}: {got:?}, Tarantool {want:?}",
                        String::from_utf8_lossy(before),
                        String::from_utf8_lossy(&text)
                    ));
                }
            }
            previous = Some((text, this));
        }
        assert!(mismatches.is_empty(), "{mismatches:#?}");
    }

    #[test]
    fn unicode_orders_as_tarantool() {
        check_order(IcuStrength::Tertiary, UNICODE_ORDER);
    }

    #[test]
    fn unicode_ci_orders_and_equates_as_tarantool() {
        check_order(IcuStrength::Primary, UNICODE_CI_ORDER);
    }

    #[test]
    fn sort_keys_hold_no_zero_byte() {
        for text in ["", "\0", "a\0b", "ä", "\u{FFFE}", "中"] {
            for strength in [IcuStrength::Primary, IcuStrength::Tertiary] {
                assert!(!key(strength, text.as_bytes()).contains(&0), "{text:?}");
            }
        }
    }

    fn relation(strength: IcuStrength, a: &str, b: &str) -> Ordering {
        key(strength, a.as_bytes()).cmp(&key(strength, b.as_bytes()))
    }

    /// Pairs Tarantool 2.6.0 (ICU 72) was asked about (same section of the reference doc):
    /// the relation at tertiary (`unicode`) and at primary (`unicode_ci`) strength.
    #[test]
    fn canonical_equivalents_and_late_characters_as_tarantool() {
        use Ordering::{Equal, Greater, Less};
        let observed = [
            ("\u{1E05}", "b\u{323}", Equal, Equal),
            ("한", "\u{1112}\u{1161}\u{11AB}", Equal, Equal),
            ("q\u{F73}", "q\u{F71}\u{F72}", Equal, Equal),
            ("\u{1CC00}", "#", Greater, Greater),
            ("\u{2EBF0}", "中", Greater, Greater),
            ("\u{2EBF0}", "\u{E0080}", Less, Less),
            ("a", "a\u{E0080}", Less, Less),
            // Not in FCD form: ICU 72's root does not normalize and tells them apart at
            // tertiary strength; equal at primary.
            ("a\u{301}\u{323}", "a\u{323}\u{301}", Less, Equal),
            ("\u{C5}\u{323}", "A\u{323}\u{30A}", Less, Equal),
            // GARAY DIGIT ZERO, assigned in Unicode 16: an unassigned code point to ICU 72.
            ("\u{10D40}", "中", Greater, Greater),
            ("\u{10D40}", "a", Greater, Greater),
        ];
        let mut differ = Vec::new();
        for (a, b, tertiary, primary) in observed {
            let got = (
                relation(IcuStrength::Tertiary, a, b),
                relation(IcuStrength::Primary, a, b),
            );
            if got != (tertiary, primary) {
                differ.push((a, b, got));
            }
        }
        // The known differences (module doc): ICU4X normalizes, and knows Unicode 16.
        assert_eq!(
            differ,
            [
                ("a\u{301}\u{323}", "a\u{323}\u{301}", (Equal, Equal)),
                ("\u{C5}\u{323}", "A\u{323}\u{30A}", (Equal, Equal)),
                ("\u{10D40}", "中", (Less, Less)),
                ("\u{10D40}", "a", (Less, Less)),
            ]
        );
    }

    /// Placement hashes sort keys: a crate update that changes them moves rows between
    /// shards (see the module doc). Update these only with a relayout of such data in mind.
    #[test]
    fn pinned_sort_keys() {
        let hex = |k: SortKeyBuf| k.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(hex(key(IcuStrength::Primary, "Ab".as_bytes())), "2b2d");
        assert_eq!(
            hex(key(IcuStrength::Tertiary, "Ab".as_bytes())),
            "2b2d010601dc05"
        );
    }
}
