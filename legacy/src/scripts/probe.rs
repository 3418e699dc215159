use tairlock::script::{CommandResult, Db, Reply, Script};

/// Answers 1: whether the server runs scripts at all. Lua: `probe.lua`.
pub static PROBE: Script = Script::new("legacy_probe", include_str!("probe.lua"), native);

fn native(_db: &mut Db, _keys: &[String], _args: &[String]) -> CommandResult<Reply> {
    Ok(Reply::Int(1))
}
