//! Legacy locks for old Redis servers (see DESIGN §5).
