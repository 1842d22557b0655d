//! FNV-1a, the one hash loopstack keeps in what it stores: a workflow table's hash
//! (`loopstack::Definition::hash`, 64 bits), the ids of child runs
//! (`loopstack::children::child_run_id`, 128 bits) and the agent's
//! fingerprint of a turn's tool calls (32 bits). Unlike std's hasher its output is
//! the same in every build and on every machine, which stored values need: a
//! change here would make waiting runs look changed and re-run transitions start
//! their children twice. Not public API: it may change in any release.

/// An FNV-1a hash of width `T` (`u32`, `u64` or `u128`).
#[derive(Debug, Clone, Copy)]
pub struct Fnv1a<T>(T);

macro_rules! fnv1a {
    ($t:ty, $offset:expr, $prime:expr) => {
        impl Default for Fnv1a<$t> {
            fn default() -> Self {
                Self($offset)
            }
        }

        impl Fnv1a<$t> {
            /// Feeds one byte.
            #[inline]
            pub fn byte(&mut self, b: u8) {
                self.0 = (self.0 ^ <$t>::from(b)).wrapping_mul($prime);
            }

            /// Feeds bytes.
            #[inline]
            pub fn bytes(&mut self, bytes: &[u8]) {
                for &b in bytes {
                    self.byte(b);
                }
            }

            /// The hash of what was fed.
            #[inline]
            pub fn finish(&self) -> $t {
                self.0
            }
        }
    };
}

fnv1a!(u32, 0x811c_9dc5, 0x0100_0193);
fnv1a!(u64, 0xcbf2_9ce4_8422_2325, 0x0000_0100_0000_01b3);
fnv1a!(u128, 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d, 0x0000_0000_0100_0000_0000_0000_0000_013b);

/// Feeds a JSON value to a hash, tagged by kind, without building its text: object
/// keys in their stored order, numbers by their value's bytes.
pub fn feed_json(value: &serde_json::Value, feed: &mut impl FnMut(&[u8])) {
    use serde_json::Value;
    match value {
        Value::Null => feed(b"n"),
        Value::Bool(b) => feed(if *b { b"t" } else { b"f" }),
        Value::Number(n) => {
            feed(b"#");
            match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => feed(&u.to_le_bytes()),
                (_, Some(i), _) => feed(&i.to_le_bytes()),
                (_, _, Some(f)) => feed(&f.to_bits().to_le_bytes()),
                _ => feed(n.to_string().as_bytes()),
            }
        }
        Value::String(s) => {
            feed(b"s");
            feed(&(s.len() as u64).to_le_bytes());
            feed(s.as_bytes());
        }
        Value::Array(items) => {
            feed(b"[");
            items.iter().for_each(|v| feed_json(v, feed));
            feed(b"]");
        }
        Value::Object(map) => {
            feed(b"{");
            for (k, v) in map {
                feed(&(k.len() as u64).to_le_bytes());
                feed(k.as_bytes());
                feed_json(v, feed);
            }
            feed(b"}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Fnv1a;

    #[test]
    fn the_published_values() {
        // The FNV-1a values of "a" at each width.
        let mut h32 = Fnv1a::<u32>::default();
        h32.bytes(b"a");
        let mut h64 = Fnv1a::<u64>::default();
        h64.bytes(b"a");
        let mut h128 = Fnv1a::<u128>::default();
        h128.bytes(b"a");
        assert_eq!(h32.finish(), 0xe40c_292c);
        assert_eq!(h64.finish(), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(h128.finish(), 0xd228_cb69_6f1a_8caf_7891_2b70_4e4a_8964);
        assert_eq!(Fnv1a::<u64>::default().finish(), 0xcbf2_9ce4_8422_2325);
    }
}
