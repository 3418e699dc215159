use tairlock::script::{CommandResult, Db, Reply, Script};

use super::db::{ends_with_nonce, intent, lease_fence, typed, writer_lease};

/// Undo what one write acquisition left behind (its lock, its intent). Lua:
/// `write_abandon.lua`.
pub static WRITE_ABANDON: Script = Script::new(
    "rw_write_abandon",
    include_str!("write_abandon.lua"),
    native,
);

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (w, wi) = (&keys[0], &keys[1]);
    let nonce = &args[0];
    typed(db, w, "string", "writer")?;
    typed(db, wi, "string", "intent")?;
    let writer = writer_lease(db, w)?;
    let intent = intent(db, wi)?;
    let mut deleted = 0;
    // Lua: `^tl1:%d+:(%d+):`, and no bound without ARGV[4].
    let seen = |lease: &[u8]| match args.get(3) {
        None => true,
        Some(bound) => lease_fence(lease)
            .zip(bound.parse::<u64>().ok())
            .is_some_and(|(fence, bound)| fence <= bound),
    };
    if writer.is_some_and(|v| ends_with_nonce(&v, nonce) && seen(&v)) {
        db.del(w);
        deleted += 1;
    }
    if intent.as_deref() == Some(nonce.as_bytes()) {
        db.del(wi);
        deleted += 1;
    }
    if deleted > 0 {
        db.publish(&args[1]);
    }
    Ok(Reply::Int(deleted))
}
