//! The decoders every lock kind shares.
//!
//! The lock kinds turn a [`Reply`] into their outcomes (`Acquire`, `Unlock`, a blocker, …)
//! themselves; what they all need is here: the array a multi-value reply must be, its integer
//! fields, and one error for a reply of a shape the script never sends.

use super::Script;
use super::reply::Reply;
use crate::error::{Error, ErrorKind, Result};

/// The elements of `script`'s array reply, or the [`unexpected`] error when it is not one.
///
/// # Errors
///
/// [`ErrorKind::Server`] when `reply` is not an array.
pub fn array<'r>(reply: &'r Reply, script: &Script) -> Result<&'r [Reply]> {
    reply.as_array().ok_or_else(|| unexpected(script, reply))
}

/// Element `i` of an array reply as an integer, if it is one.
pub fn int_at(items: &[Reply], i: usize) -> Option<i64> {
    items.get(i).and_then(Reply::as_int)
}

/// The error for a reply of a shape `script` never sends (a server that is not what it claims,
/// or a script of another version under the same SHA1).
pub fn unexpected(script: &Script, reply: &Reply) -> Error {
    Error::new(
        ErrorKind::Server,
        format!("unexpected reply from {}: {reply:?}", script.name()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::{CommandResult, Db};

    fn nothing(_: &mut Db, _: &[String], _: &[String]) -> CommandResult<Reply> {
        Ok(Reply::Nil)
    }

    static PROBE: Script = Script::new("probe", "return nil", nothing);

    #[test]
    fn decoders_take_arrays_and_integers_and_name_the_script_otherwise() {
        let reply = Reply::Array(vec![Reply::Int(1), Reply::data("x")]);
        let items = array(&reply, &PROBE).unwrap();
        assert_eq!(int_at(items, 0), Some(1));
        assert_eq!(int_at(items, 1), None);
        assert_eq!(int_at(items, 2), None);
        let err = array(&Reply::Int(3), &PROBE).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Server);
        assert!(
            err.to_string()
                .contains("unexpected reply from probe: Int(3)")
        );
    }
}
