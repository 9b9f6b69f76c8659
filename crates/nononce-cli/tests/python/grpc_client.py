"""A gRPC client of `nononce serve` in Python (grpcio), for the tests: it compiles the
service's .proto with grpc_tools.protoc at start, then either

  grpc_client.py PROTO_DIR OUT_DIR ADDR calls
      reads a JSON list of calls on stdin, each {"method": "GetNonces", "request": {...},
      "token": "..." (optional)}, makes them in order, and prints one JSON line per call:
      {"ok": MESSAGE} (a list of messages for a streaming call) or
      {"code": "INVALID_ARGUMENT", "message": "...", "received": N (messages before it)};
      bytes fields are hex, and a NonceBatch's nonces a list of hex nonces;

  grpc_client.py PROTO_DIR OUT_DIR ADDR stream COUNT FILE
      streams COUNT 64-bit counter nonces into FILE (8 bytes each, as received) and prints
      {"batches": N, "nonces": N};

  grpc_client.py PROTO_DIR OUT_DIR ADDR cancel COUNT BATCHES
      starts a stream of COUNT 64-bit counter nonces, reads BATCHES batches, cancels the call
      and prints {"nonces": N} (the nonces received).
"""

import json
import os
import sys


def compile_proto(proto_dir, out_dir):
    from grpc_tools import protoc

    proto = os.path.join("nononce", "v1", "nonces.proto")
    status = protoc.main(
        [
            "grpc_tools.protoc",
            "-I" + proto_dir,
            "--python_out=" + out_dir,
            "--grpc_python_out=" + out_dir,
            proto,
        ]
    )
    if status != 0:
        sys.exit(f"protoc failed on {proto} ({status})")
    sys.path.insert(0, out_dir)
    from nononce.v1 import nonces_pb2, nonces_pb2_grpc

    return nonces_pb2, nonces_pb2_grpc


def to_json(message):
    out = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.type == field.TYPE_BYTES:
            value = value.hex()
        elif field.enum_type is not None:
            known = field.enum_type.values_by_number.get(value)
            value = known.name if known else value
        out[field.name] = value
    if message.DESCRIPTOR.name == "NonceBatch":
        size = message.bits // 8
        raw = message.nonces
        out["nonces"] = [raw[i : i + size].hex() for i in range(0, len(raw), size)]
    return out


def calls(pb2, stub):
    from google.protobuf import json_format
    import grpc

    service = pb2.DESCRIPTOR.services_by_name["Nonces"]
    for call in json.load(sys.stdin):
        method = service.methods_by_name[call["method"]]
        request = json_format.ParseDict(
            call.get("request", {}), getattr(pb2, method.input_type.name)()
        )
        metadata = []
        if "token" in call:
            metadata.append(("authorization", "Bearer " + call["token"]))
        rpc = getattr(stub, call["method"])
        received = []
        try:
            if method.server_streaming:
                for message in rpc(request, metadata=metadata, timeout=60):
                    received.append(to_json(message))
                result = {"ok": received}
            else:
                result = {"ok": to_json(rpc(request, metadata=metadata, timeout=60))}
        except grpc.RpcError as e:
            result = {
                "code": e.code().name,
                "message": e.details(),
                "received": len(received),
            }
        print(json.dumps(result), flush=True)


def stream(pb2, stub, count, path):
    request = pb2.NoncesRequest(kind=pb2.KIND_COUNTER, bits=64, count=count)
    batches = nonces = 0
    with open(path, "wb") as out:
        for batch in stub.StreamNonces(request, timeout=120):
            if batch.bits != 64:
                sys.exit(f"a batch of {batch.bits}-bit nonces, not 64")
            out.write(batch.nonces)
            batches += 1
            nonces += len(batch.nonces) // 8
    print(json.dumps({"batches": batches, "nonces": nonces}), flush=True)


def cancel(pb2, stub, count, batches):
    request = pb2.NoncesRequest(kind=pb2.KIND_COUNTER, bits=64, count=count)
    call = stub.StreamNonces(request, timeout=60)
    nonces = 0
    for _ in range(batches):
        nonces += len(next(call).nonces) // 8
    call.cancel()
    print(json.dumps({"nonces": nonces}), flush=True)


def main():
    proto_dir, out_dir, addr, command = sys.argv[1:5]
    pb2, pb2_grpc = compile_proto(proto_dir, out_dir)
    import grpc

    with grpc.insecure_channel(addr) as channel:
        stub = pb2_grpc.NoncesStub(channel)
        if command == "calls":
            calls(pb2, stub)
        elif command == "stream":
            stream(pb2, stub, int(sys.argv[5]), sys.argv[6])
        elif command == "cancel":
            cancel(pb2, stub, int(sys.argv[5]), int(sys.argv[6]))
        else:
            sys.exit(f"unknown command {command!r}: use calls, stream or cancel")


if __name__ == "__main__":
    main()
