package main

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The greeter service, ringlimit.example.Greeter, is written by hand as
// protoc would generate it, over the well-known StringValue message, so
// that the example builds without protoc:
//
//	service Greeter {
//	  rpc Hello(google.protobuf.StringValue) returns (google.protobuf.StringValue);  // cost 1
//	  rpc Report(google.protobuf.StringValue) returns (google.protobuf.StringValue); // cost -report-cost
//	}
//
// Its descriptor is registered with the protobuf registry at start-up, so
// that server reflection (and grpcurl) can describe it.
const (
	service      = "ringlimit.example.Greeter"
	methodHello  = "/" + service + "/Hello"
	methodReport = "/" + service + "/Report"
	protoFile    = "ringlimit/example/greeter.proto"
)

func init() {
	str := ".google.protobuf.StringValue"
	fdp := &descriptorpb.FileDescriptorProto{
		Name:       proto.String(protoFile),
		Package:    proto.String("ringlimit.example"),
		Dependency: []string{"google/protobuf/wrappers.proto"},
		Syntax:     proto.String("proto3"),
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Greeter"),
			Method: []*descriptorpb.MethodDescriptorProto{
				{Name: proto.String("Hello"), InputType: &str, OutputType: &str},
				{Name: proto.String("Report"), InputType: &str, OutputType: &str},
			},
		}},
	}
	_ = wrapperspb.String // wrappers.proto is registered by importing wrapperspb
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	if err := protoregistry.GlobalFiles.RegisterFile(fd); err != nil {
		panic(err)
	}
}

type greeter struct{}

func (greeter) hello(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String("hello " + in.GetValue()), nil
}

func (greeter) report(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String("report for " + in.GetValue() + ": all quiet"), nil
}

func unary(method string, f func(greeter, context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			return f(srv.(greeter), ctx, req.(*wrapperspb.StringValue))
		}
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
	}
}

var greeterDesc = grpc.ServiceDesc{
	ServiceName: service,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Hello", Handler: unary(methodHello, greeter.hello)},
		{MethodName: "Report", Handler: unary(methodReport, greeter.report)},
	},
	Metadata: protoFile,
}
