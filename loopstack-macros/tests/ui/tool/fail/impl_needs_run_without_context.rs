use loopstack::tool;
use serde::Deserialize;

#[derive(Deserialize, schemars::JsonSchema)]
struct Room {
    room: String,
}

struct BookRoom;

/// Books a room.
#[tool(needs_run = true)]
impl BookRoom {
    async fn handle(&self, args: Room) -> String {
        args.room
    }
}

fn main() {}
