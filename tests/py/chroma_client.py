"""Drive a real Chroma server with the official `chromadb` client and
precomputed embeddings (no embedding model: `embedding_function=None`),
and print what the client saw as JSON.

usage: chroma_client.py PORT [--queries N]

One collection of five 4-dimensional vectors; a query of two vectors for
3 results each, a filtered query of one vector for 2, a get of one id,
then N more single-vector queries for 4 results (default 0).
"""
import json
import sys

import chromadb

port = int(sys.argv[1])
extra = int(sys.argv[sys.argv.index("--queries") + 1]) if "--queries" in sys.argv else 0
client = chromadb.HttpClient(host="127.0.0.1", port=port)
col = client.get_or_create_collection("tokentap", embedding_function=None)
col.add(
    ids=["a", "b", "c", "d", "e"],
    embeddings=[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1, 1, 0, 0]],
    documents=["doc a", "doc b", "doc c", "doc d", "doc e"],
    metadatas=[{"k": i} for i in range(5)],
)
out = {}
r = col.query(query_embeddings=[[1, 0.1, 0, 0], [0, 0, 1, 0.2]], n_results=3)
out["query"] = r["ids"]
r = col.query(query_embeddings=[[1, 0, 0, 0]], n_results=2, where={"k": {"$gte": 1}})
out["filtered"] = r["ids"]
out["get"] = col.get(ids=["a"])["documents"]
for i in range(extra):
    r = col.query(query_embeddings=[[0, 1, 0, 0.1 * i]], n_results=4)
    assert len(r["ids"][0]) == 4
print(json.dumps(out, sort_keys=True))
