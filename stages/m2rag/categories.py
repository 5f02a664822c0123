"""M2RAG's query topics (Table 1), one declaration for the two stages that read the config's
`m2rag.categories`: classify_queries shows them to the classifier (figure 7), release_m2rag counts
the queries of each (its card's category table). Ids 1-10 combine; 11 is "Others"."""
from stages.core.stage import Param

CATEGORIES = Param(list, help="M2RAG Table 1 categories: [{id, name, description, example}], 1-10 combinable, 11 Others", min=1, items=Param(dict, fields={
    "id": Param(int, help="topic number", min=1, max=11),
    "name": Param(str, help="topic name"),
    "description": Param(str, "", "what the topic covers, shown to the classifier (figure 7)"),
    "example": Param(str, "", "an example question of the topic, shown after its description (figure 7)"),
}))
