//! A map from declaration names to values, kept as a vector sorted by name.
//!
//! A program declares a few dozen devices, machines, models, workloads and headroom rules, each
//! looked up by name and listed in name order. A sorted vector does both with a binary search,
//! and its code is a fraction of a B-tree's: the page's wasm module carries one copy of a map's
//! code for each value type, and a B-tree's is several kilobytes.

/// Names to values, iterated in name order, as `BTreeMap<String, T>` would be.
#[derive(Clone, Debug, PartialEq)]
pub struct Table<T> {
    entries: Vec<(String, T)>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Table<T> {
    pub const fn new() -> Self {
        Self { entries: Vec::new() }
    }

    fn search(&self, name: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|(key, _)| key.as_str().cmp(name))
    }

    pub fn get(&self, name: &str) -> Option<&T> {
        self.search(name).ok().map(|index| &self.entries[index].1)
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut T> {
        self.search(name).ok().map(|index| &mut self.entries[index].1)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.search(name).is_ok()
    }

    /// Sets `name` to `value`; returns the value it replaces.
    pub fn insert(&mut self, name: String, value: T) -> Option<T> {
        match self.search(&name) {
            Ok(index) => Some(std::mem::replace(&mut self.entries[index].1, value)),
            Err(index) => {
                self.entries.insert(index, (name, value));
                None
            }
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Names and values in name order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&String, &T)> + ExactSizeIterator {
        self.entries.iter().map(|(name, value)| (name, value))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.entries.iter().map(|(name, _)| name)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.entries.iter().map(|(_, value)| value)
    }
}

/// `table["name"]`, for names known to be there: panics on a missing name, as `BTreeMap` does.
impl<T> std::ops::Index<&str> for Table<T> {
    type Output = T;

    fn index(&self, name: &str) -> &T {
        self.get(name).unwrap_or_else(|| panic!("no `{name}` in the table"))
    }
}

impl<T> Extend<(String, T)> for Table<T> {
    fn extend<I: IntoIterator<Item = (String, T)>>(&mut self, entries: I) {
        for (name, value) in entries {
            self.insert(name, value);
        }
    }
}

impl<T> FromIterator<(String, T)> for Table<T> {
    fn from_iter<I: IntoIterator<Item = (String, T)>>(entries: I) -> Self {
        let mut table = Self::new();
        table.extend(entries);
        table
    }
}

impl<T> IntoIterator for Table<T> {
    type Item = (String, T);
    type IntoIter = std::vec::IntoIter<(String, T)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

/// Names, as `BTreeSet<String>` would hold them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NameSet(Table<()>);

impl NameSet {
    /// Adds `name`; whether it was new.
    pub fn insert(&mut self, name: String) -> bool {
        self.0.insert(name, ()).is_none()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }
}

impl FromIterator<String> for NameSet {
    fn from_iter<I: IntoIterator<Item = String>>(names: I) -> Self {
        Self(names.into_iter().map(|name| (name, ())).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn names_are_kept_in_order_and_a_second_insert_replaces() {
        let mut table = Table::new();
        for (name, value) in [("h100", 1), ("a100", 2), ("l4", 3)] {
            assert_eq!(table.insert(name.to_owned(), value), None);
        }
        assert_eq!(table.insert("a100".to_owned(), 4), Some(2));
        let names: Vec<&str> = table.keys().map(String::as_str).collect();
        assert_eq!(names, ["a100", "h100", "l4"]);
        assert_eq!(table.get("a100"), Some(&4));
        assert_eq!(table.get("b200"), None);
        assert!(table.contains_key("l4"));
        assert_eq!(table.len(), 3);
    }

    #[test]
    fn a_set_says_whether_a_name_was_new() {
        let mut set = super::NameSet::default();
        assert!(set.insert("b".to_owned()));
        assert!(set.insert("a".to_owned()));
        assert!(!set.insert("b".to_owned()));
        assert!(set.contains("a") && !set.contains("c"));
    }
}
