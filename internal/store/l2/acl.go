package l2

import "strings"

// ACLCommands are the Redis commands a tier's sidecar sends in standalone
// and Sentinel mode, as docs/l2.md lists them: connection set-up, entries,
// tag sets (and what the tag script calls), leases (and what their scripts
// call), the hot set, pub/sub and the invalidation sequence (the INCR its
// script calls), and the prefix purge's SCAN. internal/sidecar's ACL test
// gives a tier's user exactly these and runs whole sidecars against a real
// redis-server with it.
var ACLCommands = []string{
	"+hello", "+ping",
	"+get", "+set", "+del", "+scan",
	"+sadd", "+smembers", "+srem", "+pttl", "+pexpire",
	"+zincrby", "+zremrangebyrank", "+zrevrange",
	"+incr", "+publish", "+subscribe",
	"+eval", "+evalsha",
}

// clusterACLCommands are what a Cluster-mode client adds: it reads the
// slot map and the command table.
var clusterACLCommands = []string{"+cluster|slots", "+command"}

// ACLSetUser is the ACL SETUSER command, as words, that gives user the
// tier with key prefix prefix and nothing else: its keys, its
// invalidation channel and ACLCommands (with the Cluster additions when
// cluster). password is the word after ">" (a placeholder when printed for
// a person).
func ACLSetUser(user, password, prefix string, cluster bool) []string {
	words := []string{"ACL", "SETUSER", user, "reset", "on", ">" + password,
		"~" + prefix + "*", "&" + prefix + "inval", "-@all"}
	words = append(words, ACLCommands...)
	if cluster {
		words = append(words, clusterACLCommands...)
	}
	return words
}

// ACLSetUserLine is ACLSetUser as one line for a person to run in
// redis-cli, with PASSWORD for the password.
func ACLSetUserLine(user, prefix string, cluster bool) string {
	return strings.Join(ACLSetUser(user, "PASSWORD", prefix, cluster), " ")
}
