//! A script's reply: one shape whichever store ran the script.

/// A reply, as Redis sends it back from a script (RESP2 shapes; errors travel separately).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A nil bulk string (Lua `false`).
    Nil,
    /// An integer (Lua numbers are truncated to integers on the way out).
    Int(i64),
    /// A bulk string.
    Data(Vec<u8>),
    /// A status reply such as `OK`.
    Status(String),
    /// An array (a Lua table; it stops at the first nil).
    Array(Vec<Reply>),
}

impl Reply {
    /// A bulk string from text.
    pub fn data(s: impl Into<Vec<u8>>) -> Self {
        Reply::Data(s.into())
    }

    /// The integer, if this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The bulk string as UTF-8 text, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Reply::Data(d) => std::str::from_utf8(d).ok(),
            Reply::Status(s) => Some(s),
            _ => None,
        }
    }

    /// The elements, if this is an array.
    pub fn as_array(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl From<redis::Value> for Reply {
    fn from(value: redis::Value) -> Self {
        use redis::Value as V;
        match value {
            V::Nil => Reply::Nil,
            V::Int(i) => Reply::Int(i),
            V::BulkString(b) => Reply::Data(b),
            V::SimpleString(s) => Reply::Status(s),
            V::Okay => Reply::Status("OK".to_owned()),
            V::Array(items) | V::Set(items) => {
                Reply::Array(items.into_iter().map(Reply::from).collect())
            }
            V::Boolean(b) => Reply::Int(i64::from(b)),
            V::Double(d) => Reply::Int(d as i64),
            other => Reply::Data(format!("{other:?}").into_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_values_map_to_resp2_shapes() {
        use redis::Value as V;
        assert_eq!(Reply::from(V::Okay), Reply::Status("OK".to_owned()));
        assert_eq!(Reply::from(V::Boolean(true)), Reply::Int(1));
        assert_eq!(
            Reply::from(V::Array(vec![V::Nil, V::BulkString(b"a".to_vec())])),
            Reply::Array(vec![Reply::Nil, Reply::data("a")])
        );
    }
}
