//! Helpers shared by the unit tests.

/// A xorshift64 generator from `seed` (nonzero): the random layouts and
/// stacks of the property tests, the same on every run.
pub fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}
