//go:build !unix

package redisstore

import "net"

// waiting cannot look into a socket here: the caller reads once more
// instead (see checkConn.Read).
func waiting(net.Conn) (ready, ok bool) { return false, false }
