package framework

// SetEnv replaces the KEY=VALUE entries the daemon gets on top of the
// test's environment (first given with WithEnv) from its next start on:
// a crash test arms a fault point for one run and restarts without it.
func (d *Daemon) SetEnv(env ...string) { d.env = env }
