//! Reader/writer locks (see DESIGN §6).
