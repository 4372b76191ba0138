//! The catalog persists definitions in the store and survives a restart.

use std::sync::Arc;

use tablegate_catalog::*;
use tablegate_store::{LocalStore, PartitionConfig, PartitionedStore, StoreOptions, TableStore};

fn col(name: &str, ty: SqlType) -> Column {
    Column::property(name, ty)
}

async fn open(dir: &std::path::Path) -> (Catalog, PartitionedStore) {
    let local = LocalStore::open(dir, StoreOptions::default()).unwrap();
    let data = PartitionedStore::new(local.clone(), PartitionConfig::default()).unwrap();
    let cat = Catalog::open(Arc::new(local), Arc::new(data.clone()))
        .await
        .unwrap();
    (cat, data)
}

#[tokio::test]
async fn definitions_survive_restart_and_ddl_behaves_like_postgres() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (cat, data) = open(dir.path()).await;
        let def = TableDef::new(
            "Runners",
            vec![
                col("race", SqlType::Text),
                col("bib", SqlType::Text),
                col("age", SqlType::Int4),
            ],
            &["race".into(), "bib".into()],
        )
        .unwrap();
        assert_eq!(
            cat.create_table(def.clone(), false).await.unwrap(),
            Created::Created
        );
        assert_eq!(
            cat.create_table(def.clone(), true).await.unwrap(),
            Created::AlreadyExisted
        );
        assert!(matches!(
            cat.create_table(def, false).await,
            Err(CatalogError::TableExists { .. })
        ));
        assert!(
            cat.add_column("runners", col("city", SqlType::Text), false)
                .await
                .unwrap()
        );
        assert!(
            !cat.add_column("runners", col("city", SqlType::Text), true)
                .await
                .unwrap()
        );
        assert!(matches!(
            cat.add_column("runners", col("city", SqlType::Text), false)
                .await,
            Err(CatalogError::DuplicateColumn { .. })
        ));
        // The store table exists and the system table stays hidden.
        let names: Vec<_> = data
            .list_tables()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(names, vec!["Runners"]);
    }
    let (cat, _) = open(dir.path()).await;
    let def = cat.table("RUNNERS").unwrap();
    assert_eq!(def.name, "Runners");
    assert_eq!(def.columns.len(), 4);
    assert_eq!(def.row_key.as_deref(), Some("bib"));
    assert!(cat.drop_table("runners", false).await.unwrap());
    assert!(!cat.drop_table("runners", true).await.unwrap());
    assert!(matches!(
        cat.drop_table("runners", false).await,
        Err(CatalogError::UnknownTable { .. })
    ));
    let (cat, data) = {
        drop(cat);
        open(dir.path()).await
    };
    assert!(cat.tables().is_empty());
    assert!(data.list_tables().await.unwrap().is_empty());
}

#[tokio::test]
async fn an_orphan_store_table_is_adopted_by_create() {
    let dir = tempfile::tempdir().unwrap();
    let (cat, data) = open(dir.path()).await;
    // As if a crash happened between creating the store table and recording it.
    data.create_table("orphan").await.unwrap();
    let def = TableDef::new("orphan", vec![col("k", SqlType::Text)], &["k".into()]).unwrap();
    assert_eq!(
        cat.create_table(def, false).await.unwrap(),
        Created::Created
    );
    assert!(cat.table("orphan").is_ok());
}
