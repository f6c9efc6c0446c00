from django.core.management.base import BaseCommand, CommandError, CommandParser

from knowledge.stores import pgvector_index, rebuild_vector_indexes


class Command(BaseCommand):
    help = (
        "Rebuild the HNSW vector index with HNSW_M and HNSW_EF_CONSTRUCTION (unset: chosen from the rows it "
        "indexes), online: the new graph is built beside the old one, which serves searches until the switch "
        "(every dimension in use by default). An index already built with them is left alone. With "
        "VECTOR_BACKEND=milvus: every chunk's vector and filter fields written to Milvus again from the chunk table."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dimension", type=int, help="only the index of this embedding dimension")

    def handle(self, *args: object, dimension: int | None, **options: object) -> None:
        index = pgvector_index()
        if index is None:  # Milvus: its vectors written again from the chunk rows
            for dim, written in rebuild_vector_indexes(dimension).items():
                self.stdout.write(f"dimension {dim}: {'vectors written to Milvus' if written else 'no chunks'}")
            return
        try:
            rebuilt = rebuild_vector_indexes(dimension)
        except ValueError as error:
            raise CommandError(str(error)) from error
        for dim, changed in rebuilt.items():
            m, ef_construction = index.built_with(dim) or (None, None)
            built = f"m {m}, ef_construction {ef_construction}"
            self.stdout.write(f"dimension {dim}: {'rebuilt with' if changed else 'already built with'} {built}")
