// Package arbiter is the job's replicated authority (doc to come).
package arbiter
