package grpclimit

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Stream returns the stream server interceptor.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if i.exempt(ss.Context(), info.FullMethod) {
			return handler(srv, ss)
		}
		if i.held {
			return i.streamHeld(srv, ss, info, handler)
		}
		ctx := ss.Context()
		var md metadata.MD
		if i.multi != nil {
			keys, costs, err := i.prepareMulti(ctx, info.FullMethod)
			if err == errDryRunPass {
				return handler(srv, ss)
			}
			if err != nil {
				return err
			}
			if i.cfg.perMessage {
				return handler(srv, &messageStream{ServerStream: ss, i: i, keys: keys, costs: costs})
			}
			md, err = i.decideMulti(ctx, keys, costs, nil)
			if md != nil {
				_ = ss.SetHeader(md)
			}
			if err != nil {
				return err
			}
			return handler(srv, ss)
		}
		key, cost, err := i.prepare(ctx, info.FullMethod)
		if err == errDryRunPass {
			return handler(srv, ss)
		}
		if err != nil {
			return err
		}
		if i.cfg.perMessage {
			return handler(srv, &messageStream{ServerStream: ss, i: i, key: key, cost: cost})
		}
		md, err = i.decide(ctx, key, cost, nil)
		if md != nil {
			_ = ss.SetHeader(md)
		}
		if err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// messageStream charges each message received on a stream.
type messageStream struct {
	grpc.ServerStream
	i     *Interceptor
	key   string
	cost  int64
	keys  []string // NewMultiInterceptor's, one per policy; nil for key
	costs []int64  // with keys, one per policy
}

// RecvMsg receives a message, then charges it; a denial is returned in
// place of the message, with the fields in the trailer metadata.
func (s *messageStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	var md metadata.MD
	var err error
	if s.keys != nil {
		md, err = s.i.decideMulti(s.Context(), s.keys, s.costs, nil)
	} else {
		md, err = s.i.decide(s.Context(), s.key, s.cost, nil)
	}
	if err != nil && md != nil {
		s.SetTrailer(md)
	}
	return err
}
