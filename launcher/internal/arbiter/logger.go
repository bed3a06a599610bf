package arbiter

import "fmt"

// quietLogger is raft's logger: it says nothing (raft's own log is of no use
// to the job, and a pure machine writes nowhere) but panics where raft asks
// for a panic or a fatal exit, which only a broken invariant causes.
type quietLogger struct{}

func (quietLogger) Debug(...any)            {}
func (quietLogger) Debugf(string, ...any)   {}
func (quietLogger) Error(...any)            {}
func (quietLogger) Errorf(string, ...any)   {}
func (quietLogger) Info(...any)             {}
func (quietLogger) Infof(string, ...any)    {}
func (quietLogger) Warning(...any)          {}
func (quietLogger) Warningf(string, ...any) {}
func (quietLogger) Fatal(v ...any)          { panic("arbiter: raft: " + fmt.Sprint(v...)) }
func (quietLogger) Fatalf(f string, v ...any) {
	panic("arbiter: raft: " + fmt.Sprintf(f, v...))
}
func (quietLogger) Panic(v ...any)            { panic("arbiter: raft: " + fmt.Sprint(v...)) }
func (quietLogger) Panicf(f string, v ...any) { panic("arbiter: raft: " + fmt.Sprintf(f, v...)) }
