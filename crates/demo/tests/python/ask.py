"""Asks tollgate-demo's gRPC Ask service N times with Python's grpcio.

Usage: ask.py TARGET PROJECT N, with the stubs grpcio-tools generated from
crates/demo/proto on PYTHONPATH. Prints one JSON object per call: the code,
and for an answer its tokens and `ratelimit` metadata, for a refusal the
RetryInfo delay (whole seconds) and the QuotaFailure subjects it holds.
"""

import json
import sys

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from tollgate.demo.v1 import ask_pb2, ask_pb2_grpc


def refusal(err):
    out = {"code": err.code().name, "message": err.details()}
    status = rpc_status.from_call(err)
    for detail in status.details if status else []:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            out["retry_delay"] = info.retry_delay.seconds
            out["retry_delay_nanos"] = info.retry_delay.nanos
        elif detail.Is(error_details_pb2.QuotaFailure.DESCRIPTOR):
            quota = error_details_pb2.QuotaFailure()
            detail.Unpack(quota)
            out["quota_subjects"] = [v.subject for v in quota.violations]
    return out


def main():
    target, project, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with grpc.insecure_channel(target) as channel:
        stub = ask_pb2_grpc.AskStub(channel)
        for _ in range(n):
            request = ask_pb2.AskRequest(project=project, question="How do I install it?")
            try:
                reply, call = stub.Ask.with_call(request, timeout=10)
                metadata = dict(call.initial_metadata())
                out = {"code": "OK", "tokens": reply.tokens, "ratelimit": metadata.get("ratelimit")}
            except grpc.RpcError as err:
                out = refusal(err)
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
