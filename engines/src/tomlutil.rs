//! TOML helpers shared by the containerd and CRI-O modules.

use toml_edit::{ArrayOfTables, Item, Table, TableLike, Value};

/// A TOML syntax error, its message without toml_edit's trailing newline (it ends an
/// error chain printed on one line).
#[derive(Debug)]
pub struct TomlSyntax(pub toml_edit::TomlError);

impl std::fmt::Display for TomlSyntax {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.to_string().trim_end())
    }
}

impl std::error::Error for TomlSyntax {}

/// A dotted TOML path for messages: `plugins."io.containerd.grpc.v1.cri".containerd`.
pub(crate) fn dotted(path: &[&str]) -> String {
    path.iter()
        .map(|k| toml_edit::Key::new(*k).display_repr().into_owned())
        .collect::<Vec<_>>()
        .join(".")
}

/// What an item is, for messages.
pub(crate) fn kind(item: &Item) -> &'static str {
    match item {
        Item::None => "nothing",
        Item::Table(_) | Item::Value(Value::InlineTable(_)) => "a table",
        Item::ArrayOfTables(_) => "an array of tables",
        Item::Value(Value::String(_)) => "a string",
        Item::Value(Value::Integer(_)) => "an integer",
        Item::Value(Value::Float(_)) => "a float",
        Item::Value(Value::Boolean(_)) => "a boolean",
        Item::Value(Value::Datetime(_)) => "a date-time",
        Item::Value(Value::Array(_)) => "an array",
    }
}

/// The table at `path` under `root`: `Ok(None)` when some part is missing,
/// `Err(depth)` when the part at `path[..=depth]` exists but is not a table.
pub(crate) fn table_at<'a>(
    root: &'a dyn TableLike,
    path: &[&str],
) -> Result<Option<&'a dyn TableLike>, usize> {
    let mut cur = root;
    for (depth, key) in path.iter().enumerate() {
        match cur.get(key) {
            None => return Ok(None),
            Some(item) => match item.as_table_like() {
                Some(t) => cur = t,
                None => return Err(depth),
            },
        }
    }
    Ok(Some(cur))
}

/// The table `key` of `table`, created (implicit: no header of its own unless it gets
/// values) when missing; an inline table there becomes a normal one. `Err(())` when
/// `key` holds something else.
pub(crate) fn table_mut<'a>(table: &'a mut Table, key: &str) -> Result<&'a mut Table, ()> {
    let item = table.entry(key).or_insert_with(|| {
        let mut t = Table::new();
        t.set_implicit(true);
        Item::Table(t)
    });
    if let Item::Value(Value::InlineTable(_)) = item {
        let inline = std::mem::take(item);
        if let Item::Value(Value::InlineTable(t)) = inline {
            *item = Item::Table(t.into_table());
        }
    }
    item.as_table_mut().ok_or(())
}

/// A copy of `src` in toml_edit's default layout: same keys and values, in the same
/// order, without the source's comments, indentation or table positions (so it can be
/// placed in another document). Tables holding only tables get no header of their own.
pub(crate) fn fresh_table(src: &dyn TableLike) -> Table {
    let mut t = Table::new();
    let mut has_values = false;
    for (key, item) in src.iter() {
        let copy = match item {
            Item::None => continue,
            Item::Value(v) => {
                has_values = true;
                Item::Value(fresh_value(v))
            }
            Item::Table(sub) => Item::Table(fresh_table(sub)),
            Item::ArrayOfTables(array) => {
                let mut out = ArrayOfTables::new();
                for sub in array.iter() {
                    out.push(fresh_table(sub));
                }
                Item::ArrayOfTables(out)
            }
        };
        t.insert(key, copy);
    }
    t.set_implicit(!has_values && !src.is_empty());
    t
}

/// `v` without the whitespace and comments around it.
pub(crate) fn fresh_value(v: &Value) -> Value {
    let mut v = v.clone();
    v.decor_mut().clear();
    v
}

/// Merges `src` into `dst` the way containerd 2.x merges imported files: tables key by
/// key, recursively; anything else from `src` replaces what `dst` had.
pub(crate) fn deep_merge(dst: &mut Table, src: &dyn TableLike) {
    for (key, item) in src.iter() {
        match item.as_table_like() {
            Some(sub) => {
                if let Ok(target) = table_mut(dst, key) {
                    deep_merge(target, sub);
                    continue;
                }
                dst.insert(key, Item::Table(fresh_table(sub)));
            }
            None => match item {
                Item::Value(v) => {
                    dst.insert(key, Item::Value(fresh_value(v)));
                }
                Item::ArrayOfTables(_) => {
                    let mut holder = Table::new();
                    holder.insert(key, item.clone());
                    if let Some(copy) = fresh_table(&holder).remove(key) {
                        dst.insert(key, copy);
                    }
                }
                Item::None | Item::Table(_) => {}
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toml_edit::DocumentMut;

    #[test]
    fn fresh_copies_drop_layout_and_keep_values() {
        let doc: DocumentMut = "[a]\n  # why\n  x = 1 # one\n  [a.b]\n    y = \"z\"\n  [a.c.d]\n"
            .parse()
            .unwrap();
        let mut out = DocumentMut::new();
        out.insert("a", Item::Table(fresh_table(doc["a"].as_table().unwrap())));
        assert_eq!(
            out.to_string(),
            "[a]\nx = 1\n\n[a.b]\ny = \"z\"\n\n[a.c.d]\n"
        );
    }

    #[test]
    fn deep_merge_merges_tables_and_replaces_values() {
        let a: DocumentMut = "[t]\nx = 1\n[t.s]\ny = 2\n".parse().unwrap();
        let b: DocumentMut = "[t]\nx = 3\n[t.s]\nz = 4\n".parse().unwrap();
        let mut out = Table::new();
        deep_merge(&mut out, a.as_table());
        deep_merge(&mut out, b.as_table());
        let mut doc = DocumentMut::new();
        for (k, v) in out.iter() {
            doc.insert(k, v.clone());
        }
        assert_eq!(doc.to_string(), "[t]\nx = 3\n\n[t.s]\ny = 2\nz = 4\n");
    }

    #[test]
    fn dotted_quotes_keys_that_need_it() {
        assert_eq!(
            dotted(&["plugins", "io.containerd.grpc.v1.cri", "containerd"]),
            "plugins.\"io.containerd.grpc.v1.cri\".containerd"
        );
    }
}
