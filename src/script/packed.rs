//! [`Packed`]: a script call's keys or arguments written one after another into one buffer.

use std::fmt::{self, Write as _};

/// A list of strings written one after another into one buffer: the `KEYS` or `ARGV` of a
/// script call that carries many small strings (a batch of renewals carries six per lease),
/// without an allocation for each. A store that writes its commands itself sends them from
/// here as they are ([`Store::eval_packed`](crate::Store::eval_packed)).
///
/// # Examples
///
/// ```
/// use tairlock::script::Packed;
///
/// let mut args = Packed::default();
/// args.push("tl1:1700000000000:7:ab");
/// args.push_fmt(format_args!("{}", 3000));
/// assert_eq!(args.len(), 2);
/// assert_eq!(args.get(1), Some("3000"));
/// assert_eq!(args.to_strings(), ["tl1:1700000000000:7:ab", "3000"]);
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Packed {
    text: String,
    /// Where each item ends in `text`.
    ends: Vec<usize>,
}

impl Packed {
    /// Room for `items` strings of `bytes` bytes in all.
    pub fn with_capacity(items: usize, bytes: usize) -> Self {
        Packed {
            text: String::with_capacity(bytes),
            ends: Vec::with_capacity(items),
        }
    }

    /// Append `item`.
    pub fn push(&mut self, item: &str) {
        self.text.push_str(item);
        self.ends.push(self.text.len());
    }

    /// Append one item written by `args` (as `format!` would make it).
    pub fn push_fmt(&mut self, args: fmt::Arguments<'_>) {
        // Writing into a `String` cannot fail.
        let _ = self.text.write_fmt(args);
        self.ends.push(self.text.len());
    }

    /// Append one item made of `parts` one after another.
    pub fn push_concat(&mut self, parts: &[&str]) {
        for part in parts {
            self.text.push_str(part);
        }
        self.ends.push(self.text.len());
    }

    /// How many items.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there is no item.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The bytes of every item together.
    pub fn total_len(&self) -> usize {
        self.text.len()
    }

    /// Item `i`.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.text[start..end])
    }

    /// The items in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + Clone + '_ {
        (0..self.ends.len()).map(move |i| {
            let start = if i == 0 { 0 } else { self.ends[i - 1] };
            &self.text[start..self.ends[i]]
        })
    }

    /// Each item as its own string, for a store that takes `&[String]`.
    pub fn to_strings(&self) -> Vec<String> {
        self.iter().map(str::to_owned).collect()
    }
}

impl fmt::Debug for Packed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_read_back_as_they_were_pushed_empty_ones_included() {
        let mut packed = Packed::with_capacity(4, 16);
        packed.push("a");
        packed.push("");
        packed.push_fmt(format_args!("{}-{}", 12, "x"));
        packed.push_concat(&["{name}", ":fence"]);
        assert_eq!(packed.len(), 4);
        assert_eq!(packed.to_strings(), ["a", "", "12-x", "{name}:fence"]);
        assert_eq!(packed.get(1), Some(""));
        assert_eq!(packed.get(4), None);
        assert_eq!(packed.iter().len(), 4);
        assert_eq!(packed.total_len(), "a12-x{name}:fence".len());
        assert_eq!(
            format!("{packed:?}"),
            r#"["a", "", "12-x", "{name}:fence"]"#
        );
        assert!(Packed::default().is_empty());
    }
}
